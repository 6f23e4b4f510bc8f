"""Job artifacts in the service's content-addressed cache (app/cache/store.py), shared by the API
and the workers through the data volume.

A worker publishes into the cache under the artifact's key; the synchronous path then finds the
same artifact for the same request. A `ContentStore` indexes what its own process wrote or found
at start-up, so the API also accepts a file another process published: it checks the file's sha256
against the digest in the job record once per file version, then serves it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app.cache.store import ContentStore, StoredEntry, sha256_range
from app.jobs.model import ArtifactRef


class SharedArtifacts:
    """The interface an object store could implement later: publish, find, resolve to a file."""

    def __init__(self, cache: ContentStore):
        self.cache = cache
        self._checked: dict[Path, tuple[int, int, int]] = {}

    def publish(self, key: str, path: Path, filename: str, meta: dict[str, Any]) -> ArtifactRef:
        """Move a finished zip into the cache. Blocking (one pass over the file)."""
        digest = sha256_range(path)
        entry = self.cache.publish(key, path, {**meta, "digest": digest, "filename": filename})
        return _ref(entry)

    def find(self, key: str) -> tuple[ArtifactRef, dict[str, Any]] | None:
        """A verified cached artifact under `key` with its metadata. Blocking."""
        entry = self.cache.get(key)
        if entry is None:
            entry = self._adopt(key)
        return (_ref(entry), entry.meta) if entry is not None else None

    def exists(self, ref: ArtifactRef) -> bool:
        """Cheap: is the artifact's file still there (not evicted)? No digest check."""
        return self.cache.data_path(ref.key).is_file()

    def path(self, ref: ArtifactRef) -> Path | None:
        """The artifact's file if it is there and holds the recorded bytes. Blocking."""
        entry = self.cache.get(ref.key)
        if entry is not None and entry.digest == ref.digest:
            return entry.path
        path = self.cache.data_path(ref.key)
        try:
            st = path.stat()
        except OSError:
            return None
        signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._checked.get(path) == signature:
            return path
        if st.st_size != ref.size or sha256_range(path) != ref.digest:
            return None
        self._checked[path] = signature
        return path

    def _adopt(self, key: str) -> StoredEntry | None:
        return foreign_entry(self.cache, key)


_checked: dict[Path, tuple[int, int, int]] = {}


def foreign_entry(store: ContentStore, key: str) -> StoredEntry | None:
    """An entry another process published into a shared store (absent from this process's
    index): read its sidecar and check the data against the digest it records, once per file
    version. Blocking."""
    path = store.data_path(key)
    try:
        meta = json.loads(store.meta_path(key).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    signature = (st.st_ino, st.st_size, st.st_mtime_ns)
    if _checked.get(path) != signature:
        try:
            ok = st.st_size == meta["size"] and meta["digest"] == sha256_range(
                path, meta.get("offset", 0), meta.get("length")
            )
        except (OSError, KeyError):
            ok = False
        if not ok:
            return None
        _checked[path] = signature
    return StoredEntry(key, path, meta)


def _ref(entry: StoredEntry) -> ArtifactRef:
    return ArtifactRef(
        key=entry.key,
        digest=entry.digest,
        size=entry.size,
        filename=str(entry.meta.get("filename", os.path.basename(entry.path))),
    )
