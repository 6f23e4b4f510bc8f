"""The one reading of a safetensors header, bounded and checked as data, for every caller:
single-tensor uploads and multipart parts (app/tensors/headers.py) and checkpoints
(app/checkpoints/files.py) see the same limits and the same faults.

The layout: an 8-byte little-endian length N, N bytes of JSON, then the data. The JSON is an
object mapping each tensor's name to {"dtype": "F16", "shape": [2, 3], "data_offsets": [b, e]}
(offsets relative to the end of the header), plus an optional "__metadata__" of strings.

The limits, checked before the JSON is parsed so a hostile header costs neither time nor memory:
- `MAX_HEADER_BYTES` (16 MiB) for N: a 70,000-tensor header takes about 7 MiB.
- `MAX_TENSORS` (65,536) per file. A header cannot hold more tensors than it has `{`, so the
  brackets are counted first (a C-speed pass) and a header with more containers than that many
  tensors need is refused unparsed: parsing it could cost tens of times its size in objects.
- Nesting: the format's own three levels (header, entry, list); anything deeper is refused,
  including headers too deep for the JSON parser itself (its RecursionError is a fault here).
- `MAX_RANK` (8) dimensions per tensor.
Every dtype is a known string, every dimension and offset a JSON integer (never a float or a
bool) checked before any arithmetic: dims >= 0, 0 <= begin <= end <= the data's size (when
known), end - begin = the dtype's size times the elements, and no two tensors' bytes overlap.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field

MAX_HEADER_BYTES = 16 << 20
MAX_TENSORS = 1 << 16
MAX_RANK = 8
# Containers a header of MAX_TENSORS tensors needs: the object, each entry with its two lists,
# the metadata object.
_MAX_CONTAINERS = 3 * MAX_TENSORS + 2
# Bytes per element of every dtype the format defines; an unknown code is refused.
ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


class HeaderFault(ValueError):
    """A safetensors header that is refused; `tensor` names the entry at fault, if one is."""

    def __init__(self, message: str, tensor: str | None = None):
        self.tensor = tensor
        super().__init__(f"tensor {tensor!r}: {message}" if tensor is not None else message)


@dataclass(frozen=True)
class Entry:
    """One tensor: its bytes are [begin, end) of the data, which starts after the header."""

    name: str
    dtype: str  # the safetensors code: F16, BF16, F32, I8, ...
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Header:
    length: int  # N, the JSON's bytes
    entries: dict[str, Entry]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def data_start(self) -> int:
        return 8 + self.length


def header_length(head: bytes) -> int:
    """N from the first 8 bytes of a file, within the limit."""
    if len(head) < 8:
        raise HeaderFault("the file ends inside the header length")
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER_BYTES:
        raise HeaderFault(
            f"a header of {length} bytes is over the limit of {MAX_HEADER_BYTES} bytes"
        )
    if length < 2:
        raise HeaderFault(f"a header of {length} bytes cannot be a JSON object")
    return length


def parse(text: bytes, data_size: int | None = None) -> Header:
    """The header whose JSON is `text` (N bytes); `data_size`, the bytes after the header when
    known, bounds every tensor's range."""
    containers = text.count(b"{") + text.count(b"[")
    if containers > _MAX_CONTAINERS:
        raise HeaderFault(
            f"the header holds {containers} JSON objects and lists: more than "
            f"{MAX_TENSORS} tensors need (the limit per file)"
        )
    try:
        raw = json.loads(text)
    except RecursionError:
        raise HeaderFault("the header nests deeper than the format's three levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HeaderFault(f"not a valid JSON header: {exc}") from None
    if not isinstance(raw, dict):
        raise HeaderFault("the header is not a JSON object")
    metadata = raw.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise HeaderFault("__metadata__ must map names to strings")
    if len(raw) > MAX_TENSORS:
        raise HeaderFault(f"{len(raw)} tensors: over the limit of {MAX_TENSORS} per file")
    entries = {name: _entry(name, value, data_size) for name, value in raw.items()}
    _no_overlap(entries)
    return Header(len(text), entries, metadata)


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(name: str, value: object, data_size: int | None) -> Entry:
    if not isinstance(value, dict) or not value.keys() >= _ENTRY_KEYS:
        # Other keys are ignored, as the format's reference reader ignores them.
        raise HeaderFault("an entry is an object with dtype, shape and data_offsets", name)
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        shown = dtype if isinstance(dtype, str) else type(dtype).__name__
        raise HeaderFault(f"dtype {shown!r} is not one of {', '.join(ITEMSIZE)}", name)
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise HeaderFault(f"shape must be a list of at most {MAX_RANK} integers", name)
    if not all(_int(d) and d >= 0 for d in shape):
        raise HeaderFault(f"shape {shape} must hold integers >= 0", name)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_int, offsets)):
        raise HeaderFault("data_offsets must be two integers [begin, end]", name)
    begin, end = offsets
    if not 0 <= begin <= end:
        raise HeaderFault(f"its byte range [{begin}, {end}) needs 0 <= begin <= end", name)
    if data_size is not None and end > data_size:
        raise HeaderFault(
            f"its byte range [{begin}, {end}) reaches past the file's {data_size} bytes of data",
            name,
        )
    # Known-bounded now: the product of at most MAX_RANK integers, compared with a range the
    # caller bounds by the file (or the header's prefix) size.
    need = math.prod(shape) * ITEMSIZE[dtype]
    if end - begin != need:
        raise HeaderFault(
            f"its byte range [{begin}, {end}) spans {end - begin} bytes; {dtype} {shape} needs "
            f"{need}",
            name,
        )
    return Entry(name, dtype, tuple(shape), begin, end)


def _no_overlap(entries: dict[str, Entry]) -> None:
    previous: Entry | None = None
    for entry in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if entry.begin == entry.end:
            continue
        if previous is not None and entry.begin < previous.end:
            raise HeaderFault(
                f"its byte range [{entry.begin}, {entry.end}) overlaps that of {previous.name!r} "
                f"[{previous.begin}, {previous.end})",
                entry.name,
            )
        previous = entry


def read(path, file_size: int | None = None) -> Header:
    """The header of the safetensors file at `path`, every range checked against its size.
    OSError passes through."""
    with open(path, "rb") as f:
        length = header_length(f.read(8))
        size = file_size if file_size is not None else os.fstat(f.fileno()).st_size
        if 8 + length > size:
            raise HeaderFault(f"the file ends inside its {length}-byte header")
        text = f.read(length)
    return parse(text, size - 8 - length)
