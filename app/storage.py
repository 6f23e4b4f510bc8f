"""The service's two stores on the data volume, opened the same way by the API and every farm
worker that shares it: artifacts (zips, by request key) and uploaded weights (by digest).

The volume's room is managed here too: when a write needs more bytes than the filesystem has
free, the artifact cache gives up its least recently used entries first (an artifact can always
be built again); uploaded weights are never evicted to make room, since a request may be about
to read them. Readiness reports a volume below ANE_MIN_FREE_BYTES, or one it cannot write.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.cache.faults import ARTIFACT_STORE, BLOB_STORE, free_bytes, store_full
from app.cache.store import ContentStore
from app.settings import Settings
from app.uploads.blobstore import BlobStore

ARTIFACT_SUFFIX = ".zip"
# The artifact cache's pool for model kits: bounded by ANE_KIT_CACHE_MAX_BYTES on their own, so a
# kit of gigabytes neither evicts every kernel nor is held to the kernels' ANE_CACHE_MAX_BYTES.
KIT_POOL = "kits"


def artifact_store(settings: Settings, **hooks) -> ContentStore:
    """`hooks`: on_evict(n) and on_corrupt() callbacks, for metrics."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return ContentStore(
        settings.cache_dir,
        settings.cache_max_bytes,
        ARTIFACT_SUFFIX,
        pools={KIT_POOL: settings.kit_cache_max_bytes},
        **hooks,
    )


def blob_store(settings: Settings) -> BlobStore:
    return BlobStore(settings.blob_dir, settings.blob_max_bytes)


def make_room(cache: ContentStore, needed: int, directory: Path, store: str) -> None:
    """Make sure `needed` bytes are free where `store` writes (`directory`), evicting cached
    artifacts if that helps; raise the store's 507 (naming the bytes) when it cannot. Blocking."""
    if not cache.make_room(needed, directory):
        raise store_full(store, directory, needed)


def volume_problems(cache: ContentStore, blobs: BlobStore, min_free: int) -> list[str]:
    """Why the data volume is not fit to serve (empty when it is): a directory that cannot be
    written, or a filesystem with less than `min_free` bytes free."""
    problems = []
    for store, path in ((ARTIFACT_STORE, cache.tmp_dir), (BLOB_STORE, blobs.store.tmp_dir)):
        if not os.access(path, os.W_OK):
            problems.append(f"the {store} directory {path} is not writable")
            continue
        try:
            free = free_bytes(path)
        except OSError as exc:
            problems.append(f"the {store} directory {path} cannot be read: {exc}")
            continue
        if free < min_free:
            problems.append(
                f"the {store} directory {path} has {free} bytes free, below "
                f"ANE_MIN_FREE_BYTES={min_free}"
            )
    return problems
