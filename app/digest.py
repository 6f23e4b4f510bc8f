"""Tensor digests: sha256 over a tensor's canonical bytes (C order, little-endian, its own dtype).

Shared by the packager (kernel.json), the service (uploaded blobs, cache keys) and the client
(which asks the service whether it already has a tensor before uploading it). numpy only, so the
client stays light.
"""

from __future__ import annotations

import hashlib

import numpy as np

_CHUNK = 1 << 24


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
        h.update(flat[start : start + _CHUNK])
    return "sha256:" + h.hexdigest()
