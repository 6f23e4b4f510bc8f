"""`analytics/coremldata.bin`: two named sections of string key/value pairs.

Every string is a u64 little-endian length then its bytes; a section is its name, a u64 entry
count, then key, value, key, value. Goldens (all five bundles) hold exactly:

    NeuralNetworkModelDetails: containsCustomLayer = "0", modelDimension = "0"
    SpecificationDetails:      modelHash = base64(SHA-256(source model.mlmodel bytes)),
                               modelName = the source spec file's stem ("model" inside a package)
"""

from __future__ import annotations

import base64
import hashlib
import struct

from app.language.errors import BadBundleError


def model_hash(model_bytes: bytes) -> str:
    return base64.b64encode(hashlib.sha256(model_bytes).digest()).decode("ascii")


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def write_analytics(model_bytes: bytes, model_name: str) -> bytes:
    sections = [
        ("NeuralNetworkModelDetails", [("containsCustomLayer", "0"), ("modelDimension", "0")]),
        (
            "SpecificationDetails",
            [("modelHash", model_hash(model_bytes)), ("modelName", model_name)],
        ),
    ]
    out = bytearray()
    for name, entries in sections:
        out += _string(name) + struct.pack("<Q", len(entries))
        for key, value in entries:
            out += _string(key) + _string(value)
    return bytes(out)


def read_analytics(
    data: bytes, where: str = "analytics/coremldata.bin"
) -> dict[str, dict[str, str]]:
    """{section: {key: value}} of an analytics file."""
    pos = 0

    def string() -> str:
        nonlocal pos
        if pos + 8 > len(data):
            raise BadBundleError(f"truncated at byte {pos}", where)
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if pos + length > len(data):
            raise BadBundleError(f"string of {length} bytes at byte {pos} runs past the end", where)
        text = data[pos : pos + length].decode("utf-8", errors="replace")
        pos += length
        return text

    sections: dict[str, dict[str, str]] = {}
    while pos < len(data):
        name = string()
        if pos + 8 > len(data):
            raise BadBundleError(f"section {name!r} has no entry count", where)
        (count,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        sections[name] = {string(): string() for _ in range(count)}
    return sections
