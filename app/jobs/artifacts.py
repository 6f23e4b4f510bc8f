"""Job artifacts in the service's content-addressed cache (app/cache/store.py), shared by the API
and the workers through the data volume.

A worker publishes into the cache under the artifact's key; the synchronous path then finds the
same artifact for the same request. A `ContentStore` indexes what its own process wrote or found
at start-up, so an entry another process published is checked against the sha256 its sidecar
records and then adopted into this process's index (`ContentStore.adopt`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app.cache.store import ContentStore, Published, StoredEntry, sha256_range
from app.jobs.model import ArtifactRef


class SharedArtifacts:
    """The interface an object store could implement later: publish, find, resolve to a file."""

    def __init__(self, cache: ContentStore):
        self.cache = cache

    def publish(
        self,
        key: str,
        path: Path,
        filename: str,
        meta: dict[str, Any],
        digest: str | None = None,
    ) -> ArtifactRef:
        """Move a finished zip into the cache. Blocking: a pass over the file, unless the
        writer already computed its `digest` (`DigestingWriter`)."""
        digest = digest or sha256_range(path)
        entry = self.cache.publish(key, path, {**meta, "digest": digest, "filename": filename})
        return _ref(entry)

    def find(self, key: str) -> tuple[ArtifactRef, dict[str, Any]] | None:
        """A verified cached artifact under `key` with its metadata. Blocking."""
        entry = self.cache.get(key) or foreign_entry(self.cache, key)
        return (_ref(entry), entry.meta) if entry is not None else None

    def exists(self, ref: ArtifactRef) -> bool:
        """Cheap: is the artifact's file still there (not evicted)? No digest check."""
        return self.cache.data_path(ref.key).is_file()

    def path(self, ref: ArtifactRef) -> Path | None:
        """The artifact's file if it is there and holds the recorded bytes. Blocking."""
        entry = self.cache.get(ref.key) or foreign_entry(self.cache, ref.key)
        return entry.path if entry is not None and entry.digest == ref.digest else None


def foreign_entry(store: ContentStore, key: str) -> StoredEntry | None:
    """An entry another process published into a shared store (absent from this process's
    index): check the data against the digest its sidecar records, then index it here so it
    counts towards this process's size bound and LRU. Blocking."""
    path, sidecar = store.data_path(key), store.meta_path(key)
    try:
        text = sidecar.read_text()
        meta = json.loads(text)
        st = path.stat()
        ok = st.st_size == meta["size"] and meta["digest"] == sha256_range(
            path, meta.get("offset", 0), meta.get("length")
        )
    except (OSError, ValueError, KeyError):
        return None
    if not ok:
        return None
    signature = (st.st_ino, st.st_size, st.st_mtime_ns)
    return store.adopt(Published(key, meta, signature, st.st_size + len(text)))


def _ref(entry: StoredEntry) -> ArtifactRef:
    return ArtifactRef(
        key=entry.key,
        digest=entry.digest,
        size=entry.size,
        filename=str(entry.meta.get("filename", os.path.basename(entry.path))),
    )
