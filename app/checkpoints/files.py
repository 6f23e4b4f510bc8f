"""A safetensors checkpoint on disk: one file, or shards listed by model.safetensors.index.json,
read through their headers only; tensors are memory-mapped when they are converted.

The safetensors layout: an 8-byte little-endian header length, a JSON header mapping each tensor
name to its dtype, shape and [begin, end) byte range (relative to the end of the header), then
the bytes. Every range is checked against the dtype, the shape and the file's size when the
checkpoint is opened, so a truncated or inconsistent file is refused before anything is read.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from app.errors import RequestError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
ITEMSIZE = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}  # the float dtypes a checkpoint converts from
MAX_HEADER = 100 << 20  # the safetensors format's own bound on its header


@dataclass(frozen=True)
class Tensor:
    """Where one tensor's bytes are: [offset, offset + nbytes) of `path`."""

    name: str
    path: Path
    offset: int
    dtype: str  # safetensors code: F16, BF16, F32, F64
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]


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
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            (length,) = struct.unpack("<Q", head) if len(head) == 8 else (None,)
            if length is None or length > min(MAX_HEADER, size - 8):
                raise _bad(shown, "not a safetensors file (no valid header length)")
            header = json.loads(f.read(length))
    except OSError as exc:
        raise _bad(shown, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise _bad(shown, f"not a valid safetensors header: {exc}") from None
    if not isinstance(header, dict):
        raise _bad(shown, "the safetensors header is not a JSON object")
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = entry["dtype"]
            begin, end = (int(v) for v in entry["data_offsets"])
            shape = tuple(int(d) for d in entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise _bad(shown, f"tensor {name!r}: malformed header entry") from None
        if dtype not in ITEMSIZE:
            tensors[name] = Tensor(name, path, base + begin, dtype, shape)  # refused when used
            continue
        tensor = Tensor(name, path, base + begin, dtype, shape)
        if end - begin != tensor.nbytes or base + end > size or begin < 0:
            raise _bad(shown, f"tensor {name!r}: its byte range [{begin}, {end}) does not hold "
                       f"{dtype} {list(shape)} within the file")  # fmt: skip
        tensors[name] = tensor
    return tensors


def tensor_count(path: Path) -> int | None:
    """How many tensors a safetensors file's header lists; None when it is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or f.read(1) != b"{":
                return None
            header = json.loads(b"{" + f.read(length - 1))
    except (OSError, ValueError):
        return None
    return len([k for k in header if k != "__metadata__"]) if isinstance(header, dict) else None


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


def _sharded(index: Path) -> dict[str, Tensor]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        if not isinstance(weight_map, dict):
            raise ValueError("weight_map is not an object")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _bad(index, f"not a safetensors index (weight_map): {exc}") from None
    tensors: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        if not isinstance(shard, str) or Path(shard).name != shard:
            raise _bad(index, f"shard {shard!r} must be a file name beside the index")
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
