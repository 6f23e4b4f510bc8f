"""`coremldata.bin`: the compiled bundle's header, its ModelDescription, one trailer per function.

Layout, checked against every golden (spec 6 and 7, coremlc 3402 and 3500):

    0x00  u32  502            (the ML Program model type number)
    0x04  u32  5              (5 in every golden, whatever the spec version: its meaning is
                               unknown; a writer that puts the spec version here is wrong)
    0x08  20 zero bytes
    0x1c  u32  7, u32 0, then "generic" (7 bytes)
    0x2b  u8   specification version
    0x2c  31 zero bytes
    0x4b  u64  length of the ModelDescription that follows
    0x53  ModelDescription protobuf (multi-function models carry `functions` = field 20 and
          `defaultFunctionName` = field 21 inside it, as the source does)
    then  one 16-byte record per function: u32 502 + 12 zero bytes (a single record for a
          single-function model; one per function as described for coremlc 3520 in
          mlmodelc-export's notes: no golden here has two functions)

The description is the source's, re-serialised the way Apple's writer does: fields in number
order, and an empty `metadata` (field 100) when the source has none (no golden here lacks
metadata; mlmodelc-export's notes on coremlc 3520 report the empty field). Apple's writer puts the
entries of `metadata.userDefined` (a protobuf map) in an order that changes from run to run
(three goldens compiled from byte-identical descriptions hold three different orders), so no
writer can reproduce it; this one keeps the source's order.
"""

from __future__ import annotations

import struct

from app.language.errors import BadBundleError, BadPackageError
from app.mlmodelc.wire import read_fields

MAGIC = 502
HEADER_SIZE = 0x53
TRAILER = struct.pack("<I12x", MAGIC)
_EMPTY_METADATA = bytes([0xA2, 0x06, 0x00])  # field 100, length 0


COREMLDATA = "coremldata.bin"  # the bundle's description file, beside model.mil


def _header(spec_version: int, payload_length: int) -> bytes:
    head = struct.pack("<II20xII7sB31xQ", MAGIC, 5, 7, 0, b"generic", spec_version, payload_length)
    assert len(head) == HEADER_SIZE
    return head


def canonical_description(description: bytes, where: str = "model.mlmodel") -> bytes:
    """The description as Apple re-serialises it: fields in number order, metadata present."""
    try:
        fields = read_fields(description)
    except ValueError as exc:
        raise BadPackageError(f"ModelDescription does not parse: {exc}", where) from None
    ordered = sorted(fields, key=lambda f: f.number)  # stable: repeated fields keep their order
    out = b"".join(f.raw for f in ordered)
    if not any(f.number == 100 for f in fields):
        out += _EMPTY_METADATA
    return out


def function_count(description: bytes) -> int:
    return sum(1 for f in read_fields(description) if f.number == 20)


def write_coremldata(spec_version: int, description: bytes) -> bytes:
    """`coremldata.bin` for a model of `spec_version` with this (canonical) description."""
    trailers = TRAILER * max(1, function_count(description))
    return _header(spec_version, len(description)) + description + trailers


def read_coremldata(data: bytes, where: str = COREMLDATA) -> tuple[int, bytes]:
    """(specification version, ModelDescription bytes) of a compiled bundle's coremldata.bin."""
    if len(data) < HEADER_SIZE + len(TRAILER):
        raise BadBundleError(f"{len(data)} bytes is too short for a coremldata.bin", where)
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic != MAGIC or data[0x24:0x2B] != b"generic":
        raise BadBundleError("not an ML Program coremldata.bin (bad magic)", where)
    spec_version = data[0x2B]
    (length,) = struct.unpack_from("<Q", data, 0x4B)
    end = HEADER_SIZE + length
    if end + len(TRAILER) > len(data):
        raise BadBundleError(f"description of {length} bytes runs past the end of the file", where)
    description = data[HEADER_SIZE:end]
    try:
        read_fields(description)
    except ValueError as exc:
        raise BadBundleError(f"ModelDescription does not parse: {exc}", where) from None
    return spec_version, description
