"""An embedded model's protobuf read without its weights' bytes: `lean_model`.

protobuf parses a message from its bytes into a message that holds a copy of every field, so
parsing a 400 MB model embedding its weights costs the file twice at once. Here the file is
read field by field: the graph's initializers are copied without their `raw_data` (each one's
offset and length in the file recorded instead, to be read from there by offset as external
data is, a chunk at a time, into fp16), and everything else is copied as it is. What is left to
parse is the graph's structure, kilobytes. Anything this reader does not expect (a truncated
file, a malformed field) returns None, and the caller parses the file whole, which refuses it
with protobuf's own message.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_NAME, _TENSOR_RAW = 8, 9  # TensorProto.name, TensorProto.raw_data
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5


class _Malformed(Exception):
    pass


def _varint(f: BinaryIO) -> int:
    shift = result = 0
    while True:
        byte = f.read(1)
        if not byte:
            raise _Malformed
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise _Malformed


def _encode(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _fields(f: BinaryIO, end: int):
    """(field, wire type, the tag's bytes) of each field up to `end`, f at its payload."""
    while f.tell() < end:
        start = f.tell()
        tag = _varint(f)
        here = f.tell()
        f.seek(start)
        yield tag >> 3, tag & 7, f.read(here - start)


def _payload(f: BinaryIO, wire: int, end: int) -> bytes:
    """The field's bytes after its tag, as they are (a length-delimited one with its length)."""
    start = f.tell()
    if wire == _VARINT:
        _varint(f)
    elif wire == _I64:
        f.seek(8, 1)
    elif wire == _I32:
        f.seek(4, 1)
    elif wire == _LEN:
        length = _varint(f)
        f.seek(length, 1)
    else:
        raise _Malformed
    stop = f.tell()
    if stop > end:
        raise _Malformed
    f.seek(start)
    return f.read(stop - start)


def _tensor(f: BinaryIO, end: int, raw: dict[str, tuple[int, int]]) -> bytes:
    out = bytearray()
    name, found = b"", None
    for number, wire, tag in _fields(f, end):
        if number == _TENSOR_RAW and wire == _LEN:
            length = _varint(f)
            found = (f.tell(), length)
            f.seek(length, 1)
            if f.tell() > end:
                raise _Malformed
            continue
        payload = _payload(f, wire, end)
        if number == _TENSOR_NAME and wire == _LEN:
            name = payload[len(payload) - _decoded_length(payload) :]
        out += tag + payload
    if found is not None:
        raw[name.decode("utf-8", "replace")] = found
    return bytes(out)


def _decoded_length(payload: bytes) -> int:
    """The length a length-delimited payload (its varint then its bytes) declares."""
    shift = result = 0
    for byte in payload:
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result
    raise _Malformed


def _message(f: BinaryIO, end: int, inner: dict[int, object], raw: dict) -> bytes:
    """A message's bytes up to `end`, the length-delimited fields numbered in `inner` rewritten
    by their function, every other field copied."""
    out = bytearray()
    for number, wire, tag in _fields(f, end):
        rewrite = inner.get(number)
        if rewrite is not None and wire == _LEN:
            length = _varint(f)
            stop = f.tell() + length
            if stop > end:
                raise _Malformed
            # inner's values are the rewrite functions; the table is typed `object`
            body = rewrite(f, stop, raw)  # type: ignore[operator]
            f.seek(stop)
            out += tag + _encode(len(body)) + body
        else:
            out += tag + _payload(f, wire, end)
    return bytes(out)


def _graph(f: BinaryIO, end: int, raw: dict) -> bytes:
    return _message(f, end, {_GRAPH_INITIALIZER: _tensor}, raw)


def lean_model(path: Path, size: int) -> tuple[bytes, dict[str, tuple[int, int]]] | None:
    """(the model's bytes without its initializers' raw_data, each such initializer's (offset,
    length) in the file), or None when the file is not what this reader expects."""
    raw: dict[str, tuple[int, int]] = {}
    try:
        with open(path, "rb", buffering=1 << 16) as f:
            lean = _message(f, size, {_MODEL_GRAPH: _graph}, raw)
    except (_Malformed, OSError):
        return None
    return lean, raw
