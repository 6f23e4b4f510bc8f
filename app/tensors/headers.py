"""Tensors in files (.npy, safetensors or raw bytes): their headers read without loading them.

`parse_header` reads the first bytes of a file and says where its tensor's bytes sit, with their
dtype and shape. Uploads use it twice: while the bytes arrive (to hash only the tensor's range,
app/uploads/hashing.py) and once they are on disk (`sniff`). Multipart parts, the blob store and
farm manifests all read tensors through here; a build maps the file (np.memmap) instead of
copying it. A file whose bytes are not canonical (big-endian, Fortran order) is rewritten once in
canonical form.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from app.core.digest import file_digest
from app.core.files import atomic_file
from app.errors import RequestError
from app.tensors import safetensors_header
from app.tensors.safetensors_header import MAX_HEADER_BYTES

_NPY_MAGIC = b"\x93NUMPY"
_SAFETENSORS_DTYPES = {
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
}
MAX_HEADER = MAX_HEADER_BYTES  # a .npy header's bound too
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


@dataclass(frozen=True)
class Header:
    """Where a file's tensor sits: its bytes are [offset, offset + nbytes)."""

    source: str  # "npy", "safetensors" or "raw"
    offset: int
    dtype: np.dtype  # as stored (a .npy may be big-endian)
    shape: tuple[int, ...]
    fortran: bool = False

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _bad(field: str, detail: str) -> RequestError:
    return RequestError(field, detail, title="Unreadable tensor")


def _check_dtype(field: str, dtype: np.dtype) -> np.dtype:
    if dtype.kind not in "fiu" or dtype.itemsize > 8 or dtype.fields is not None:
        raise _bad(field, f"dtype {dtype} is not a plain number type")
    return dtype


def _check_shape(field: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) > MAX_RANK or any(int(d) < 1 for d in shape) or not shape:
        raise _bad(field, f"shape {list(shape)} must have rank 1..{MAX_RANK} and no empty axis")
    return tuple(int(d) for d in shape)


def parse_header(
    head: bytes,
    field: str,
    *,
    tensor_name: str | None = None,
    raw_dtype: str | None = None,
    raw_shape: tuple[int, ...] | None = None,
    whole: bool = False,
    exact_name: bool = False,
    file_size: int | None = None,
) -> Header | None:
    """The tensor a file starting with `head` holds; None when more bytes are needed to tell
    (never when `whole`: `head` is the whole file).

    The format is told by the first bytes (.npy magic, a safetensors header), else raw bytes,
    which need `raw_dtype` and `raw_shape`. For safetensors, `tensor_name` picks the tensor (or
    the only one, when the file holds one, unless `exact_name`); the header is read as
    app/tensors/safetensors_header.py reads every one, its ranges bounded by `file_size` when known."""
    if len(head) < 16 and not whole:
        return None
    if head.startswith(_NPY_MAGIC):
        return _npy(head, field, whole)
    if head[8:9] == b"{":
        return _safetensors(head, field, tensor_name, whole, exact_name, file_size)
    if raw_dtype is None or raw_shape is None:
        raise _bad(field, "not a .npy or safetensors file; raw bytes need a dtype and a shape")
    dtype = _check_dtype(field, np.dtype(raw_dtype).newbyteorder("<"))
    return Header("raw", 0, dtype, _check_shape(field, raw_shape))


def _more(field: str, whole: bool) -> None:
    """Nothing (the caller waits for more bytes), or the error for a file that ends inside its
    header."""
    if whole:
        raise _bad(field, "the file ends inside its header")


def _npy(head: bytes, field: str, whole: bool) -> Header | None:
    if len(head) < 12:
        _more(field, whole)
        return None
    major = head[6]
    if major == 1:
        end = 10 + struct.unpack("<H", head[8:10])[0]
    else:
        end = 12 + struct.unpack("<I", head[8:12])[0]
    if end > MAX_HEADER:
        raise _bad(field, f"a .npy header of {end} bytes is implausible")
    if len(head) < end:
        _more(field, whole)
        return None
    f = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, SyntaxError, struct.error, TypeError) as exc:
        raise _bad(field, f"not a valid .npy header: {exc}") from None
    _check_dtype(field, dtype)
    return Header("npy", f.tell(), dtype, _check_shape(field, shape), fortran)


def _safetensors(
    head: bytes,
    field: str,
    tensor_name: str | None,
    whole: bool,
    exact_name: bool = False,
    file_size: int | None = None,
) -> Header | None:
    try:
        length = safetensors_header.header_length(head)
        if len(head) < 8 + length:
            _more(field, whole)
            return None
        data_size = None if file_size is None else file_size - 8 - length
        tensors = safetensors_header.parse(head[8 : 8 + length], data_size).entries
    except safetensors_header.HeaderFault as exc:
        raise _bad(field, f"safetensors header: {exc}") from None
    if tensor_name is not None and tensor_name in tensors:
        name = tensor_name
    elif exact_name:
        raise _bad(field, f"no tensor {tensor_name!r} in the file (it has {', '.join(tensors)})")
    elif len(tensors) == 1:
        name = next(iter(tensors))
    else:
        want = f"a tensor named {tensor_name!r} or " if tensor_name else ""
        raise _bad(
            field,
            f"safetensors file must hold {want}exactly one tensor; it holds "
            f"{sorted(tensors)[:8]}{' ...' if len(tensors) > 8 else ''}",
        )
    entry = tensors[name]
    if entry.dtype not in _SAFETENSORS_DTYPES:
        raise _bad(
            field,
            f"safetensors tensor {name!r}: dtype {entry.dtype} is not one a tensor file holds "
            f"({', '.join(_SAFETENSORS_DTYPES)}); upload the file with POST /v1/blobs, which "
            "stores it as a checkpoint, and name the tensor as sha256:<digest>#<name>",
        )
    dtype = _check_dtype(field, np.dtype(_SAFETENSORS_DTYPES[entry.dtype]))
    return Header("safetensors", 8 + length + entry.begin, dtype, _check_shape(field, entry.shape))


def _read_head(f, field: str, **options) -> Header:
    head, want = b"", 1 << 16
    while True:
        chunk = f.read(want)
        head += chunk
        found = parse_header(head, field, whole=len(chunk) < want, **options)
        if found is not None:
            return found
        want = len(head)


def sniff(
    path: Path,
    field: str,
    *,
    tensor_name: str | None = None,
    raw_dtype: str | None = None,
    raw_shape: tuple[int, ...] | None = None,
) -> TensorFile:
    """The tensor in the file at `path` (see `parse_header`), checked against the file's size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = _read_head(
            f,
            field,
            tensor_name=tensor_name,
            raw_dtype=raw_dtype,
            raw_shape=raw_shape,
            file_size=size,
        )
    end = header.offset + header.nbytes
    if end > size:
        raise _bad(
            field,
            f"truncated {header.source}: dtype {header.dtype.name} shape {list(header.shape)} "
            f"needs {header.nbytes} bytes of data, the file has {max(0, size - header.offset)}",
        )
    if header.source != "safetensors" and end != size:
        raise _bad(
            field,
            f"{size - end} bytes after the data of dtype {header.dtype.name} shape "
            f"{list(header.shape)}: the file and its declared shape disagree",
        )
    tensor = TensorFile(path, header.offset, header.dtype, header.shape, header.source)
    if header.fortran or header.dtype.byteorder == ">":
        return _canonicalise(tensor, header.fortran)
    return replace(tensor, dtype=header.dtype.newbyteorder("<"))


def read_tensor(path: Path, field: str, tensor_name: str | None = None) -> np.ndarray:
    """The tensor in a .npy or safetensors file (`tensor_name` must name it in the latter),
    mapped read-only as stored: the file is left exactly as it is."""
    with open(path, "rb") as f:
        header = _read_head(
            f, field, tensor_name=tensor_name, exact_name=True, file_size=path.stat().st_size
        )
    if header.source == "raw":
        raise _bad(field, "not a .npy or safetensors file")
    if header.offset + header.nbytes > path.stat().st_size:
        raise _bad(field, f"truncated {header.source}: the data ends before {header.nbytes} bytes")
    order: Literal["F", "C"] = "F" if header.fortran else "C"
    return np.memmap(path, header.dtype, "r", offset=header.offset, shape=header.shape, order=order)


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
    with atomic_file(tensor.path) as f:
        canonical.tofile(f)
    return replace(tensor, offset=0, dtype=canonical.dtype, source="npy")


def with_digest(tensor: TensorFile, streamed: tuple[int, int, str] | None = None) -> TensorFile:
    """Hash the tensor's canonical bytes (a pass over its range of the file), unless the digest
    `streamed` while the file arrived covers exactly that range."""
    if tensor.digest:
        return tensor
    if streamed is not None and streamed[:2] == (tensor.offset, tensor.nbytes):
        return replace(tensor, digest=streamed[2])
    return replace(tensor, digest=file_digest(tensor.path, tensor.offset, tensor.nbytes))
