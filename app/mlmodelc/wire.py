"""Protobuf wire format, field by field: enough to copy a message's fields verbatim and in order.

The compiler keeps the source's bytes where Apple keeps them (the ModelDescription), so it
reads them as tagged fields rather than through a parse/serialise round trip that could reorder
map entries or drop unknown fields.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    wire_type: int
    raw: bytes  # tag + payload, exactly as in the message
    payload: bytes  # the value bytes (for length-delimited fields, without the length)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def write_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(number: int, payload: bytes) -> bytes:
    return write_varint(number << 3 | 2) + write_varint(len(payload)) + payload


def read_fields(data: bytes) -> list[Field]:
    """Every top-level field of a serialised message, in order. Raises ValueError if malformed."""
    fields = []
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ValueError(f"field number 0 at byte {start}")
        value_start = pos
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length, value_start = _varint(data, pos)
            pos = value_start + length
        else:
            raise ValueError(f"unsupported wire type {wire_type} at byte {start}")
        if pos > len(data):
            raise ValueError(f"field {number} at byte {start} runs past the end")
        fields.append(Field(number, wire_type, data[start:pos], data[value_start:pos]))
    return fields
