"""Reads the header of an uploaded tensor file (.npy, safetensors or raw bytes) without loading it.

The result says where the tensor's bytes sit in the file, so the digest is a streamed pass over
that range and the build maps the file (np.memmap) instead of copying it. A file whose bytes are
not canonical (big-endian, Fortran order) is rewritten once in canonical form.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from app.cache.store import sha256_range
from app.service.problems import Problem

_NPY_MAGIC = b"\x93NUMPY"
_SAFETENSORS_DTYPES = {
    "F16": "float16", "F32": "float32", "F64": "float64",
    "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
    "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
}  # fmt: skip
_MAX_SAFETENSORS_HEADER = 1 << 24  # the format's own recommended bound is 100 MB; 16 MiB is ample
MAX_RANK = 8


@dataclass(frozen=True)
class TensorFile:
    path: Path
    offset: int  # where the tensor's bytes start
    dtype: np.dtype  # little-endian
    shape: tuple[int, ...]
    source: str  # "npy", "safetensors" or "raw"
    digest: str = ""  # sha256 of the canonical bytes, once computed

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def array(self) -> np.ndarray:
        """The tensor, mapped read-only from the file (no copy)."""
        return np.memmap(self.path, self.dtype, "r", offset=self.offset, shape=self.shape)


def _bad(field: str, detail: str) -> Problem:
    return Problem(422, f"{field}: {detail}", title="Unreadable tensor", field=field)


def _check_dtype(field: str, dtype: np.dtype) -> np.dtype:
    if dtype.kind not in "fiu" or dtype.itemsize > 8 or dtype.fields is not None:
        raise _bad(field, f"dtype {dtype} is not a plain number type")
    return dtype


def _check_shape(field: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) > MAX_RANK or any(int(d) < 1 for d in shape) or not shape:
        raise _bad(field, f"shape {list(shape)} must have rank 1..{MAX_RANK} and no empty axis")
    return tuple(int(d) for d in shape)


def sniff(
    path: Path,
    field: str,
    *,
    tensor_name: str | None = None,
    raw_dtype: str | None = None,
    raw_shape: tuple[int, ...] | None = None,
) -> TensorFile:
    """Identify the file's format by its first bytes (.npy magic, safetensors header), else raw.

    For safetensors, `tensor_name` picks the tensor (or the only one, when the file has one).
    Raw bytes need `raw_dtype` and `raw_shape`.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(16)
        if head.startswith(_NPY_MAGIC):
            tensor = _npy(f, path, field)
        elif len(head) >= 9 and head[8:9] == b"{":
            tensor = _safetensors(f, path, field, tensor_name)
        else:
            if raw_dtype is None or raw_shape is None:
                raise _bad(
                    field,
                    "not a .npy or safetensors file; raw bytes need a dtype and a shape",
                )
            dtype = _check_dtype(field, np.dtype(raw_dtype).newbyteorder("<"))
            tensor = TensorFile(path, 0, dtype, _check_shape(field, raw_shape), "raw")
    end = tensor.offset + tensor.nbytes
    if end > size:
        raise _bad(
            field,
            f"truncated {tensor.source}: dtype {tensor.dtype.name} shape {list(tensor.shape)} "
            f"needs {tensor.nbytes} bytes of data, the file has {max(0, size - tensor.offset)}",
        )
    if tensor.source != "safetensors" and end != size:
        raise _bad(
            field,
            f"{size - end} bytes after the data of dtype {tensor.dtype.name} shape "
            f"{list(tensor.shape)}: the file and its declared shape disagree",
        )
    return tensor


def _npy(f, path: Path, field: str) -> TensorFile:
    f.seek(0)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, SyntaxError, struct.error, TypeError) as exc:
        raise _bad(field, f"not a valid .npy header: {exc}") from None
    _check_dtype(field, dtype)
    tensor = TensorFile(path, f.tell(), dtype, _check_shape(field, shape), "npy")
    if fortran or dtype.byteorder == ">":
        return _canonicalise(tensor, fortran)
    return replace(tensor, dtype=dtype.newbyteorder("<"))


def _canonicalise(tensor: TensorFile, fortran: bool) -> TensorFile:
    """Rewrite a big-endian or Fortran-ordered tensor as little-endian C-order raw bytes."""
    mapped = np.memmap(
        tensor.path,
        tensor.dtype,
        "r",
        offset=tensor.offset,
        shape=tensor.shape,
        order="F" if fortran else "C",
    )
    canonical = np.ascontiguousarray(mapped, dtype=tensor.dtype.newbyteorder("<"))
    tmp = tensor.path.with_suffix(".canonical")
    canonical.tofile(tmp)
    os.replace(tmp, tensor.path)
    return replace(tensor, offset=0, dtype=canonical.dtype, source="npy")


def _safetensors(f, path: Path, field: str, tensor_name: str | None) -> TensorFile:
    f.seek(0)
    (header_len,) = struct.unpack("<Q", f.read(8))
    if header_len > _MAX_SAFETENSORS_HEADER:
        raise _bad(field, f"safetensors header of {header_len} bytes is implausible")
    raw = f.read(header_len)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except ValueError as exc:
        raise _bad(field, f"not a valid safetensors header: {exc}") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if tensor_name is not None and tensor_name in tensors:
        name = tensor_name
    elif len(tensors) == 1:
        name = next(iter(tensors))
    else:
        want = f"a tensor named {tensor_name!r} or " if tensor_name else ""
        raise _bad(
            field,
            f"safetensors file must hold {want}exactly one tensor; it holds {sorted(tensors)}",
        )
    entry = tensors[name]
    try:
        dtype = np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]])
        begin, end = (int(x) for x in entry["data_offsets"])
        shape = tuple(int(d) for d in entry["shape"])
    except (KeyError, TypeError, ValueError):
        raise _bad(
            field, f"safetensors tensor {name!r}: unsupported dtype or malformed entry"
        ) from None
    tensor = TensorFile(
        path, 8 + header_len + begin, _check_dtype(field, dtype), _check_shape(field, shape),
        "safetensors",
    )  # fmt: skip
    if end - begin != tensor.nbytes:
        raise _bad(
            field,
            f"safetensors tensor {name!r}: data_offsets span {end - begin} bytes, "
            f"dtype and shape need {tensor.nbytes}",
        )
    return tensor


def with_digest(tensor: TensorFile, streamed: tuple[int, int, str] | None = None) -> TensorFile:
    """Hash the tensor's canonical bytes (a pass over its range of the file), unless the digest
    `streamed` while the file arrived covers exactly that range."""
    if tensor.digest:
        return tensor
    if streamed is not None and streamed[:2] == (tensor.offset, tensor.nbytes):
        return replace(tensor, digest=streamed[2])
    return replace(tensor, digest=sha256_range(tensor.path, tensor.offset, tensor.nbytes))
