"""The kernel service: a kernel request in, the artifact to answer with out.

    incoming -> memo of exact request bytes?  -> the cached artifact
             -> request -> a compile?         -> a job (app/service/compiled.py)
                        -> cache hit?         -> the cached artifact
                        -> one build per key at a time, in the worker pool:
                           prepare -> package -> digest -> publish, indexed here

The answer is typed: the artifact's bytes when small (kept in memory), else an open file, opened
here so an eviction between finding and opening it is handled here too (by building again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from app.artifacts import Limits, Stored, build_and_publish
from app.cache.faults import is_full
from app.cache.hot import HotArtifacts
from app.cache.memo import Fingerprint, RequestMemo
from app.cache.singleflight import SingleFlight
from app.cache.store import ContentStore, StoredEntry
from app.compile.runner import runs_alone
from app.errors import FieldError
from app.jobs.lifecycle import Job
from app.observability.metrics import Metrics
from app.request import KernelRequest
from app.service.pool import BuildPool


@dataclass(frozen=True)
class Served:
    """An artifact to answer with. Exactly one of `content` (small: in memory) and `file` (an
    open file the caller streams, then closes) is set."""

    digest: str
    filename: str
    op: str
    size: int
    built: bool  # this request's build produced it (X-Cache: miss)
    content: bytes | None = None
    file: BinaryIO | None = None
    preflight: str | None = None  # the ANE preflight's summary (X-ANE-Preflight)
    work: dict | None = None  # the programs' FLOPs and bytes, for X-ANE-Estimate

    @property
    def etag(self) -> str:
        return f'"{self.digest}"'


@dataclass(frozen=True)
class Pending:
    """A compile that outlived the wait: the caller follows the job."""

    job: Job


class Incoming(Protocol):
    """A request as it came in: the exact bytes' fingerprint (for the memo; None when it has
    none), and the request itself, parsed on demand."""

    fingerprint: Fingerprint | None

    async def request(self) -> KernelRequest: ...


class KernelService:
    def __init__(
        self,
        store: ContentStore,
        pool: BuildPool,
        metrics: Metrics,
        compiled: Callable[[KernelRequest], Awaitable[Served | Pending]],
        limits: Limits,
    ):
        self.store, self.pool, self.metrics = store, pool, metrics
        self.compiled = compiled  # answers requests for compiled formats
        self.limits = limits
        self._flights: SingleFlight[tuple[StoredEntry, bool, bytes | None]] = SingleFlight()
        self.memo = RequestMemo()
        self.hot = HotArtifacts()

    async def answer(self, incoming: Incoming) -> Served | Pending:
        fingerprint = incoming.fingerprint
        if fingerprint is not None and (hit := self._remembered(fingerprint)) is not None:
            return hit
        request = await incoming.request()
        if request.compiled:  # a compile (.mlmodelc, or .aimodel for devices) runs as a job
            return await self.compiled(request)
        served = await self.serve(request)
        if fingerprint is not None and not request.bypass_cache:
            self.memo.put(fingerprint, request.op, request.key)
        return served

    def _remembered(self, fingerprint: Fingerprint) -> Served | None:
        """The cached artifact of a request seen before with exactly these bytes, if its entry
        is present and verified; anything else goes the long way."""
        found = self.memo.get(fingerprint)
        if found is None:
            return None
        op, key = found
        entry = self.store.verified(key)
        served = self._open(entry, op, built=False) if entry is not None else None
        if served is None:
            self.memo.forget(fingerprint)
            return None
        self.metrics.cache_hits.labels(op).inc()
        return served

    async def serve(self, request: KernelRequest) -> Served:
        """The request's artifact, from the cache or built now."""
        entry, built, content = await self._artifact(request)
        served = self._open(entry, request.op, built, content)
        if served is None:  # evicted between finding and opening it: build it again, once
            entry, built, content = await self._artifact(request)
            served = self._open(entry, request.op, built, content)
        if served is None:
            raise FileNotFoundError(f"artifact {entry.key} vanished twice while being served")
        return served

    def _open(
        self, entry: StoredEntry, op: str, built: bool, content: bytes | None = None
    ) -> Served | None:
        """The artifact's bytes: in memory when small (read once, then kept), else an open file
        (held open, so an eviction cannot pull it away mid-answer); None if it is gone."""
        content = content or self.hot.get(entry.key, entry.signature)
        size = entry.size
        args = (entry.digest, str(entry.meta["filename"]), op, size, built)
        preflight, work = entry.meta.get("preflight"), entry.meta.get("work")
        if content is not None:
            return Served(*args, content=content, preflight=preflight, work=work)
        try:
            f = open(entry.path, "rb")  # noqa: SIM115 - the caller streams and closes it
        except FileNotFoundError:
            return None
        if size > self.hot.max_item_bytes:
            return Served(*args, file=f, preflight=preflight, work=work)
        with f:
            content = f.read()
        self.hot.put(entry.key, entry.signature, content)
        return Served(*args, content=content, preflight=preflight, work=work)

    async def _artifact(self, request: KernelRequest) -> tuple[StoredEntry, bool, bytes | None]:
        """(entry, whether this request built it, its bytes when a build handed them over)."""
        key = request.key
        if not request.bypass_cache:
            found = self.store.verified(key)
            if found is not None:
                self.metrics.cache_hits.labels(request.op).inc()
                return found, False, None

        async def flight() -> tuple[StoredEntry, bool, bytes | None]:
            # Looked up again: an earlier flight may have published it meanwhile; an entry
            # present but unverified costs a pass over its file, off the loop.
            if not request.bypass_cache and key in self.store:
                entry = self.store.verified(key) or await asyncio.to_thread(self.store.get, key)
                if entry is not None:
                    return entry, False, None
            entry, content = await self._build(request, key)
            return entry, True, content

        if request.bypass_cache:  # a forced rebuild does not join someone else's build
            (entry, built, content), leader = await flight(), True
        else:
            (entry, built, content), leader = await self._flights.do(key, flight)
        miss = built and leader
        (self.metrics.cache_misses if miss else self.metrics.cache_hits).labels(request.op).inc()
        return entry, miss, content

    async def _build(self, request: KernelRequest, key: str) -> tuple[StoredEntry, bytes | None]:
        self.metrics.builds.labels(request.op).inc()
        alone = runs_alone(request.weight_bytes)
        args = (build_and_publish, request, self.store.location, key, self.limits)
        try:
            stored: Stored = await self.pool.run(*args, alone=alone)
        except FieldError as exc:
            # The cache's disk is full: give up least recently used artifacts for the room this
            # one needs and build once more; refuse (507) only when that cannot make room.
            needed = exc.extra.get("needed_bytes") if is_full(exc) else None
            if not needed or not await asyncio.to_thread(self.store.make_room, needed):
                raise
            stored = await self.pool.run(*args, alone=alone)
        entry = self.store.adopt(stored.published)
        if stored.content is not None:
            self.hot.put(key, entry.signature, stored.content)
        self.metrics.build_seconds.labels(request.op).observe(stored.seconds)
        self.metrics.cache_bytes.set(self.store.total_bytes)
        return entry, stored.content
