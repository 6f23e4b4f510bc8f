"""Digests, spelled one way everywhere: `sha256:<64 hex>`.

Tensor digests are sha256 over a tensor's canonical bytes (C order, little-endian, its own
dtype), shared by the packager (kernel.json), the service (uploaded blobs, cache keys) and the
client (which asks the service whether it already has a tensor before uploading it). numpy
only, so the client stays light.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np

PREFIX = "sha256:"
# What users may write: `sha256:<hex>`, or the bare hex.
DIGEST_PATTERN = r"^(sha256:)?[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)
# A weight may also name one tensor of an uploaded safetensors file: `sha256:<hex>#<tensor>`.
WEIGHT_REF_PATTERN = r"^(sha256:)?[0-9a-f]{64}(#[^#\s]{1,512})?$"
_CHUNK = 1 << 24
_FILE_CHUNK = 1 << 22


def spelled(hexdigest: str) -> str:
    """A hex sha256 as the service spells digests: `sha256:<hex>`."""
    return PREFIX + hexdigest


def hex_of(digest: str) -> str | None:
    """`sha256:<hex>` or bare hex -> the hex; None when it is neither."""
    return digest.removeprefix(PREFIX) if _DIGEST.match(digest) else None


def canonical(array: np.ndarray) -> np.ndarray:
    """The same values, C-contiguous and little-endian (a view when already so)."""
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array


def tensor_digest(array: np.ndarray) -> str:
    """`sha256:<hex>` of the canonical bytes, hashed in chunks (no copy of large tensors)."""
    flat = canonical(array).reshape(-1).view(np.uint8)
    h = hashlib.sha256()
    for start in range(0, flat.size, _CHUNK):
        h.update(flat[start : start + _CHUNK].data)
    return spelled(h.hexdigest())


def file_digest(path: str | os.PathLike[str], offset: int = 0, length: int | None = None) -> str:
    """`sha256:<hex>` of `length` bytes of a file from `offset` (default: to its end)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        remaining = length if length is not None else -1
        while remaining:
            chunk = f.read(_FILE_CHUNK if remaining < 0 else min(_FILE_CHUNK, remaining))
            if not chunk:
                break
            h.update(chunk)
            remaining -= len(chunk) if remaining > 0 else 0
    return spelled(h.hexdigest())


def json_digest(canonical_json: str) -> str:
    """`sha256:<hex>` of a canonical JSON text."""
    return spelled(hashlib.sha256(canonical_json.encode()).hexdigest())
