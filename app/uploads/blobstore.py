"""Uploaded weight tensors, stored by the digest of their canonical bytes.

An upload is published by renaming its spool file, header and all, so a 200 MB tensor is never
copied: the sidecar records where its bytes start, their dtype and shape, and the build maps it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from app.cache.store import ContentStore, StoredEntry
from app.uploads.tensors import TensorFile, with_digest

_HEX = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


def digest_hex(digest: str) -> str | None:
    """'sha256:<hex>' or bare hex -> hex; None when it is neither."""
    m = _HEX.match(digest)
    return m.group(1) if m else None


class BlobStore:
    def __init__(self, root: Path, max_bytes: int, **hooks):
        self.store = ContentStore(root, max_bytes, ".tensor", **hooks)

    def new_spool_path(self) -> Path:
        return self.store.temp_path()

    def __contains__(self, digest: str) -> bool:
        hex_ = digest_hex(digest)
        return hex_ is not None and hex_ in self.store

    def put(self, tensor: TensorFile) -> TensorFile:
        """Publish a sniffed upload (its file must be in the store's tmp dir). Blocking: the
        digest is a pass over the file; run it off the event loop."""
        if not tensor.digest:
            tensor = with_digest(tensor)
        key = tensor.digest.removeprefix("sha256:")
        existing = self.store.get(key)
        if existing is not None:
            tensor.path.unlink(missing_ok=True)
            return _tensor(existing)
        entry = self.store.publish(
            key,
            tensor.path,
            {
                "digest": tensor.digest,
                "offset": tensor.offset,
                "length": tensor.nbytes,
                "dtype": tensor.dtype.name,
                "shape": list(tensor.shape),
                "source": tensor.source,
            },
        )
        return _tensor(entry)

    def get(self, digest: str) -> TensorFile | None:
        """The stored tensor (its digest checked once per file version), or None. Blocking."""
        hex_ = digest_hex(digest)
        entry = self.store.get(hex_) if hex_ else None
        return _tensor(entry) if entry is not None else None


def _tensor(entry: StoredEntry) -> TensorFile:
    m = entry.meta
    return TensorFile(
        entry.path,
        int(m["offset"]),
        np.dtype(m["dtype"]).newbyteorder("<"),
        tuple(m["shape"]),
        m["source"],
        m["digest"],
    )
