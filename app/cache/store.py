"""A content-addressed file store on disk: atomic publish, LRU eviction by bytes, digest checks.

Each entry is a data file plus a small JSON sidecar, both published by rename so a reader never
sees half a file. The sidecar records the sha256 of a byte range of the data file (the whole zip
for an artifact, the tensor region for an uploaded weight). No fsync: an entry torn by a crash
fails its digest check on first read and is dropped, which is all a cache needs.

Checking a digest costs a pass over the file, so it is done once per file version: the store
remembers (inode, size, mtime) of every entry it has verified or written itself, and a file
changed behind its back (different stat) is verified again. The LRU clock is the file's atime,
set explicitly on every hit, so the order survives restarts; mtime is left alone for the check.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cache.faults import free_bytes, same_filesystem
from app.core.digest import file_digest
from app.core.files import discard, in_flight, remove
from app.core.tempnames import owner_gone, temp_name

log = logging.getLogger("ane.cache")
_ATIME_GRANULARITY_NS = 60 * 10**9


# Leftovers older than this are a crashed writer's debris, not another process's work in progress:
# the rule for files whose writer cannot be asked (orphaned data files, another host's temp files,
# names that do not say who wrote them).
STALE_AFTER_S = 3600.0


def _is_stale(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def _abandoned(temp: Path) -> bool:
    """A temp file nobody will finish: its writer, on this host, has ended; or, when the writer
    cannot be asked from here, it has not been touched for `STALE_AFTER_S`."""
    gone = owner_gone(temp.name)
    return gone if gone is not None else _is_stale(temp)


@dataclass(frozen=True)
class StoredEntry:
    key: str
    path: Path  # the data file
    meta: dict[str, Any]  # sidecar: digest, offset, length, size, plus the owner's fields
    signature: tuple[int, int, int] | None = None  # (inode, size, mtime) as verified

    @property
    def size(self) -> int:
        return int(self.meta["size"])

    @property
    def digest(self) -> str:
        return str(self.meta["digest"])


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class StoreLocation:
    """Where a store keeps its files: all another process needs to publish into it."""

    root: Path
    suffix: str  # of the data files, e.g. ".zip"

    def data_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{self.suffix}"

    def meta_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    def temp_path(self) -> Path:
        """A fresh name for a file to be written and then published (its writer named in it)."""
        return self.tmp_dir / temp_name(".part")


@dataclass(frozen=True)
class Published:
    """An entry put in place on disk by `publish_files`, ready for `ContentStore.adopt`."""

    key: str
    meta: dict[str, Any]
    signature: tuple[int, int, int]
    disk_bytes: int


def publish_files(store: StoreLocation, key: str, src: Path, meta: dict[str, Any]) -> Published:
    """The disk half of publishing: sidecar to a temp file, then both renamed into place (data
    first: a sidecar never points at a missing file). Safe to run in a worker process."""
    st = src.stat()
    meta = {"offset": 0, "length": st.st_size, **meta, "size": st.st_size}
    data, sidecar = store.data_path(key), store.meta_path(key)
    text = json.dumps(meta, sort_keys=True)
    with in_flight(store.tmp_dir / temp_name(".meta")) as tmp:
        try:
            tmp.write_text(text)  # inside the try: a full disk must not leave half a sidecar
            try:
                os.replace(src, data)
            except FileNotFoundError:  # the first entry under its prefix (a mkdir each time)
                data.parent.mkdir(exist_ok=True)
                os.replace(src, data)
            os.replace(tmp, sidecar)
        except BaseException:
            discard(tmp)
            raise
    return Published(key, meta, _signature(data.stat()), st.st_size + len(text))


class ContentStore:
    def __init__(
        self,
        root: Path,
        max_bytes: int,
        suffix: str,
        on_evict: Callable[[int], None] = lambda n: None,
        on_corrupt: Callable[[], None] = lambda: None,
        pools: Mapping[str, int] | None = None,
    ):
        self.root = root
        self.max_bytes = max_bytes
        # Entries whose sidecar names one of these pools (`meta["pool"]`) are bounded by its own
        # bytes and evict only each other (model kits, gigabytes each, beside small kernels);
        # every other entry counts towards `max_bytes`.
        self.pools = dict(pools or {})
        self.suffix = suffix
        self.location = StoreLocation(root, suffix)
        self._on_evict, self._on_corrupt = on_evict, on_corrupt
        self._lock = threading.Lock()
        self._lru: OrderedDict[str, int] = OrderedDict()  # key -> bytes on disk, oldest first
        # the bytes of _lru's entries per pool (None: the rest), kept as entries come and go
        self._pool_bytes: dict[str | None, int] = {}
        self._verified: dict[str, tuple[int, int, int]] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self.tmp_dir = root / "tmp"
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self._scan()

    # -- layout --------------------------------------------------------------------------------
    def data_path(self, key: str) -> Path:
        return self.location.data_path(key)

    def meta_path(self, key: str) -> Path:
        return self.location.meta_path(key)

    def temp_path(self) -> Path:
        return self.location.temp_path()

    @property
    def total_bytes(self) -> int:
        return sum(self._pool_bytes.values())

    def __contains__(self, key: str) -> bool:
        return key in self._lru

    def __len__(self) -> int:
        return len(self._lru)

    def _scan(self) -> None:
        """Rebuild the index from disk: oldest access first; drop abandoned temp files and
        orphans.

        The store may sit on a volume shared with other processes and hosts (API, workers): a
        temp file may be another process's upload or publish in progress, so only those whose
        writer has ended are removed (`_abandoned`); a data file without its sidecar only once
        untouched for `STALE_AFTER_S`."""
        self.sweep_tmp()
        found = []
        for meta_path in self.root.glob("??/*.json"):
            key = meta_path.stem
            data = self.data_path(key)
            try:
                st = data.stat()
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                self._remove(key)
                continue
            found.append((st.st_atime_ns, key, st.st_size + meta_path.stat().st_size, meta))
        for _, key, size, meta in sorted(found):
            self._lru[key] = size
            self._meta[key] = meta
            pool = self._pool_of(key)
            self._pool_bytes[pool] = self._pool_bytes.get(pool, 0) + size
        for orphan in self.root.glob(f"??/*{self.suffix}"):
            if orphan.name.removesuffix(self.suffix) not in self._lru and _is_stale(orphan):
                orphan.unlink(missing_ok=True)

    def sweep_tmp(self) -> int:
        """Remove the temp files and scratch directories in tmp_dir nobody will finish
        (`_abandoned`: their writer on this host has ended, or, when it cannot be asked, they
        have not been touched for STALE_AFTER_S); how many. At start-up, and when a job whose
        worker died is tried again or given up."""
        abandoned = [t for t in self.tmp_dir.iterdir() if _abandoned(t)]
        for temp in abandoned:
            remove(temp)
        if abandoned:
            log.info(
                "removed abandoned temp files",
                extra={"store": str(self.root), "files": len(abandoned)},
            )
        return len(abandoned)

    # -- reading -------------------------------------------------------------------------------
    def verified(self, key: str) -> StoredEntry | None:
        """The entry if it is present and its file already verified: no pass over the file, so
        cheap enough for the event loop. An entry present but unverified (see `get`) is None
        here and still `in` the store."""
        meta = self._meta.get(key)
        if meta is None:
            return None
        path = self.data_path(key)
        try:
            st = path.stat()
        except OSError:
            self._forget(key)
            return None
        if self._verified.get(key) != _signature(st):
            return None
        self._touch(key, path, st)
        return StoredEntry(key, path, meta, _signature(st))

    def verify(self, key: str) -> StoredEntry | None:
        """Check an entry's digest; a corrupted entry is removed (and counted) and None returned."""
        meta = self._meta.get(key)
        if meta is None:
            return None
        path = self.data_path(key)
        try:
            st = path.stat()
            ok = st.st_size == meta["size"] and (
                file_digest(path, meta.get("offset", 0), meta.get("length")) == meta["digest"]
            )
        except OSError:
            ok = False
        if not ok:
            log.warning("corrupted cache entry removed", extra={"key": key, "path": str(path)})
            self._on_corrupt()
            self._remove(key)
            return None
        self._verified[key] = _signature(st)
        self._touch(key, path, st)
        return StoredEntry(key, path, meta, _signature(st))

    def meta_by_digest(self, digest: str) -> dict[str, Any] | None:
        """The sidecar of an entry this process has indexed whose content has `digest` (an
        artifact's ETag), or None. A scan of the in-memory index: no file is read."""
        return next((m for m in list(self._meta.values()) if m.get("digest") == digest), None)

    def get(self, key: str) -> StoredEntry | None:
        """The entry with its digest checked (once per file version), or None. An entry another
        process published into a shared store is found too, checked, and indexed here. Blocking:
        call it off the event loop."""
        if key in self._meta:
            return self.verified(key) or self.verify(key)
        return self._foreign(key)

    def _foreign(self, key: str) -> StoredEntry | None:
        """An entry another process published (absent from this index): check the data against
        the digest its sidecar records, then index it so it counts towards this process's size
        bound and LRU."""
        path, sidecar = self.data_path(key), self.meta_path(key)
        try:
            text = sidecar.read_text()
            meta = json.loads(text)
            st = path.stat()
            ok = st.st_size == meta["size"] and meta["digest"] == file_digest(
                path, meta.get("offset", 0), meta.get("length")
            )
        except (OSError, ValueError, KeyError):
            return None
        if not ok:
            return None
        return self.adopt(Published(key, meta, _signature(st), st.st_size + len(text)))

    def _touch(self, key: str, path: Path, st: os.stat_result) -> None:
        with self._lock:
            if key in self._lru:
                self._lru.move_to_end(key)
        # The on-disk clock only orders entries across restarts: once a minute per entry is
        # plenty, and spares a syscall on every hit.
        now = time.time_ns()
        if now - st.st_atime_ns > _ATIME_GRANULARITY_NS:
            with contextlib.suppress(OSError):
                os.utime(path, ns=(now, st.st_mtime_ns))

    # -- writing -------------------------------------------------------------------------------
    def publish(self, key: str, src: Path, meta: dict[str, Any]) -> StoredEntry:
        """Move `src` (a file in tmp_dir, fully written) into the store under `key`.

        `meta` must hold `digest` (sha256 of [offset, offset+length) of the file, default the
        whole file); the caller computed it while or after writing, so it is trusted here.
        """
        return self.adopt(publish_files(self.location, key, src, meta))

    def adopt(self, published: Published) -> StoredEntry:
        """Index an entry whose files `publish_files` put in place (possibly in another
        process); evicts the least recently used entries beyond the size bound."""
        key = published.key
        with self._lock:
            self._forget_locked(key)  # a key published again may change size (or pool)
            self._meta[key] = published.meta
            self._verified[key] = published.signature
            pool = self._pool_of(key)
            self._pool_bytes[pool] = self._pool_bytes.get(pool, 0) + published.disk_bytes
            self._lru[key] = published.disk_bytes
            self._lru.move_to_end(key)
            victims = self._victims(keep=key)
        for victim in victims:
            self._remove(victim)
        if victims:
            self._on_evict(len(victims))
        return StoredEntry(key, self.data_path(key), published.meta, published.signature)

    def make_room(self, needed: int, where: Path | None = None) -> bool:
        """Evict least recently used entries until `needed` bytes are free on the filesystem
        holding `where` (default: this store); whether they are. Entries are only worth evicting
        when they sit on that filesystem; a file still open elsewhere frees its bytes when it is
        closed, so more may go than the shortfall."""
        where = where or self.root
        if free_bytes(where) >= needed:
            return True
        if not same_filesystem(self.root, where):
            return False
        evicted = 0
        while free_bytes(where) < needed:
            with self._lock:
                victim = next(iter(self._lru), None)
            if victim is None:
                break
            self._remove(victim)
            evicted += 1
        if evicted:
            log.info(
                "evicted to make room",
                extra={"store": str(self.root), "evicted": evicted, "needed_bytes": needed},
            )
            self._on_evict(evicted)
        return free_bytes(where) >= needed

    def _pool_of(self, key: str) -> str | None:
        pool = self._meta.get(key, {}).get("pool")
        return pool if pool in self.pools else None

    def _victims(self, keep: str) -> list[str]:
        """The oldest entries of `keep`'s pool beyond that pool's bound (never `keep`)."""
        pool = self._pool_of(keep)
        bound = self.max_bytes if pool is None else self.pools[pool]
        total, victims = self._pool_bytes.get(pool, 0), []
        for key, size in self._lru.items():  # oldest first; stops as soon as it fits
            if total <= bound:
                break
            if key != keep and self._pool_of(key) == pool:
                victims.append(key)
                total -= size
        return victims

    def _forget(self, key: str) -> None:
        with self._lock:
            self._forget_locked(key)

    def _forget_locked(self, key: str) -> None:
        size = self._lru.pop(key, 0)
        pool = self._pool_of(key)
        self._pool_bytes[pool] = self._pool_bytes.get(pool, 0) - size
        self._meta.pop(key, None)
        self._verified.pop(key, None)

    def _remove(self, key: str) -> None:
        self._forget(key)
        # Sidecar first: without it the data file is an orphan nobody reads.
        self.meta_path(key).unlink(missing_ok=True)
        self.data_path(key).unlink(missing_ok=True)
