"""A safetensors checkpoint on disk: one file, or shards listed by model.safetensors.index.json,
read through their headers only; tensors are memory-mapped when they are converted.

Headers are read by app/tensors/safetensors_header.py, the one bounded reading uploads use too: every
range is checked against the dtype, the shape, the other tensors and the file's size when the
checkpoint is opened, so a truncated or inconsistent file is refused before anything is read.
"""

from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.checkpoints.config import json_limits
from app.core.jsonfile import JsonLimits, read_model
from app.errors import RequestError
from app.tensors import safetensors_header

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
NAME_BYTES = 255  # the longest file name Linux and macOS take (NAME_MAX)


def file_name(name: str) -> str:
    """`name` if it is one file's own name: no folder, not hidden, no NUL or control character,
    at most NAME_BYTES bytes of UTF-8; else ValueError saying why."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError("a file's own name: no folders, not hidden")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError("a file name holds no NUL or control characters")
    if len(name.encode("utf-8", "surrogatepass")) > NAME_BYTES:
        raise ValueError(f"a file name is at most {NAME_BYTES} bytes")
    return name


class ShardIndex(BaseModel):
    """model.safetensors.index.json: which shard beside it holds each tensor."""

    model_config = ConfigDict(extra="allow")

    weight_map: Annotated[
        dict[str, Annotated[str, AfterValidator(file_name)]],
        Field(max_length=safetensors_header.MAX_TENSORS),
    ]


@dataclass(frozen=True)
class Tensor:
    """Where one tensor's bytes are: [offset, offset + nbytes) of `path`."""

    name: str
    path: Path
    offset: int
    dtype: str  # safetensors code: F16, BF16, F32, F64 convert; others are refused when used
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * safetensors_header.ITEMSIZE[self.dtype]


def _bad(path: Path | str, detail: str) -> RequestError:
    return RequestError("checkpoint", f"{path}: {detail}", title="Unreadable checkpoint")


def read_header(
    path: Path, field: str = "checkpoint", label: str | None = None
) -> dict[str, Tensor]:
    """Every tensor of one safetensors file, its float tensors checked against the file's size;
    faults name `field` and the file as `label` (default its path)."""
    shown = label or str(path)
    try:
        return _read_header(path, shown)
    except RequestError as exc:
        raise RequestError(field, exc.message, title=exc.title) from None


def _read_header(path: Path, shown: str) -> dict[str, Tensor]:
    try:
        header = safetensors_header.read(path)
    except OSError as exc:
        raise _bad(shown, f"cannot read: {exc.strerror or exc}") from None
    except safetensors_header.HeaderFault as exc:
        raise _bad(shown, f"not a safetensors file: {exc}") from None
    base = header.data_start
    # Every range was checked against the file; a dtype a checkpoint does not convert from is
    # kept, and refused when its tensor is used.
    return {
        name: Tensor(name, path, base + e.begin, e.dtype, e.shape)
        for name, e in header.entries.items()
    }


def looks_like_safetensors(path: Path) -> bool:
    """Whether a file starts as a safetensors file does: a little-endian u64 length, then a JSON
    object of that many bytes, which the file holds. Its header is read and checked by
    `read_header`; a file whose ninth byte is `{` by chance (one in 256 of random bytes) but
    whose length does not fit in it is any other file."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    if len(head) != 9 or head[8:9] != b"{":
        return False
    length = int.from_bytes(head[:8], "little")
    return 2 <= length <= size - 8


def stored_whole(path: Path) -> int | None:
    """How many tensors an uploaded safetensors file holds when it is to be stored whole, as a
    checkpoint: it holds several, or one a tensor blob cannot hold as it is (BF16, converted to
    fp16 when used). None when it is not a safetensors file or is a plain one-tensor file.
    Faults of its header are the upload's, raised as for a checkpoint."""
    if not looks_like_safetensors(path):
        return None
    tensors = read_header(path, "file", "the uploaded safetensors file")
    if len(tensors) > 1 or any(t.dtype == "BF16" for t in tensors.values()):
        return len(tensors)
    return None


def open_checkpoint(path: str | Path) -> dict[str, Tensor]:
    """The tensors of a checkpoint: a .safetensors file, an index.json of shards, or a directory
    holding either; by tensor name."""
    path = Path(path)
    if path.is_dir():
        index = path / INDEX_NAME
        path = index if index.exists() else path / SINGLE_NAME
    if not path.exists():
        raise RequestError("checkpoint", f"{path}: no such file", title="Unreadable checkpoint")
    if path.name.endswith(".json"):
        return _sharded(path)
    return read_header(path)


def _sharded(index: Path, limits: JsonLimits | None = None) -> dict[str, Tensor]:
    limits = limits or json_limits()
    shards = read_model(index, ShardIndex, str(index), field="checkpoint", limits=limits)
    weight_map = shards.weight_map
    tensors: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        found = read_header(index.parent / shard)
        tensors |= {n: t for n, t in found.items() if weight_map.get(n) == shard}
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise _bad(index, f"tensor {missing[0]!r} is not in its shard {weight_map[missing[0]]}")
    return tensors


class Mapped:
    """The checkpoint's files mapped read-only, one mapping per file, closed together."""

    def __init__(self) -> None:
        self._maps: dict[Path, mmap.mmap] = {}
        self._files: list = []

    def of(self, tensor: Tensor) -> mmap.mmap:
        mapped = self._maps.get(tensor.path)
        if mapped is None:
            f = open(tensor.path, "rb")  # noqa: SIM115 - closed in close()
            self._files.append(f)
            mapped = self._maps[tensor.path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return mapped

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        for f in self._files:
            f.close()
        self._maps.clear()
        self._files.clear()

    def __enter__(self) -> Mapped:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
