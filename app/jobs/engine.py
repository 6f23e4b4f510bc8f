"""The job engine interface and what every engine shares: submit (dedup by key), batches,
cancel, listing, artifact files.

Two engines implement the dispatch: `EmbeddedEngine` (an asyncio queue and worker tasks inside
the API process: the default, nothing else to run) and `ArqEngine` (arq on Redis, jobs run by
`ane-kernels worker` processes, possibly on other machines).
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.cache.store import ContentStore
from app.jobs.kinds import producer_of
from app.jobs.lifecycle import (
    ArtifactRef,
    Batch,
    Job,
    JobError,
    JobRequest,
    JobState,
    WorkerInfo,
    batch_view,
)
from app.jobs.queues import QUEUE_LINUX, QUEUE_MACOS
from app.jobs.records import Records
from app.kits.limits import KitLimits
from app.settings import Settings


def queue_for(request: JobRequest) -> str:
    """Each request says whether it needs a Mac (Core ML's placement report, Core AI's device
    compile, a kit's device check); every other job, .mlmodelc included (the linux compiler
    backend), runs on any worker."""
    return QUEUE_MACOS if request.needs_macos else QUEUE_LINUX


class JobEngine(ABC):
    name: str
    records: Records

    def __init__(self, settings: Settings, store: ContentStore):
        # `store` is the artifact cache, shared with the API and every worker through the data
        # volume: a job's artifact is there under its key, found by the synchronous path too.
        self.settings, self.store = settings, store

    # -- what engines differ in ----------------------------------------------------------------
    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def _dispatch(self, job: Job) -> None:
        """Hand a freshly stored job to the workers."""

    async def _redispatch(self, job: Job) -> None:
        """A duplicate submission of an unfinished job: make sure it is queued (idempotent)."""
        return None

    @abstractmethod
    async def _stop(self, job: Job) -> None:
        """Stop a cancelled job wherever it runs (or keep it from starting)."""

    @abstractmethod
    async def workers(self) -> list[WorkerInfo]: ...

    def check(self, request: JobRequest) -> None:
        """Raise if this engine can never run `request` (e.g. mlmodelc without any compiler)."""
        return None

    async def unready(self) -> str | None:
        """Why this engine cannot take jobs now (its broker is unreachable); None when it can."""
        return None

    # -- shared --------------------------------------------------------------------------------
    def _replaceable(self, request: JobRequest, old: Job) -> bool:
        if old.state in (JobState.failed, JobState.cancelled):
            return True
        if old.state == JobState.succeeded:
            gone = old.artifact is None or not self.store.data_path(old.artifact.key).is_file()
            return request.bypass_cache or gone
        return False  # queued or running: join it

    async def submit(self, request: JobRequest, limits: KitLimits | None = None) -> Job:
        """The job for `request`: an existing one (same key, not failed) or a new one; a new
        one whose artifact the store already holds is finished at once, without a worker (a
        job lost with its broker and submitted again, a kernel built by another path).
        `limits`: a model kit's own, recorded with a new job for whichever worker runs it."""
        self.check(request)
        job = Job(id=request.key, queue=queue_for(request), request=request, limits=limits)
        job = job.enter(JobState.queued)
        if not request.bypass_cache and (found := await self._stored(request)) is not None:
            job = job.enter(JobState.succeeded, **found)
        record, created = await self.records.claim(job, lambda old: self._replaceable(request, old))
        if created and not record.done:
            await self._dispatch(record)
        elif not created and not record.done:
            await self._redispatch(record)
        return record

    async def _stored(self, request: JobRequest) -> dict[str, Any] | None:
        """The finished job's fields when the artifact cache holds the request's artifact (for
        a compiled one, under its key for a toolchain a live worker has)."""

        async def toolchains() -> list[dict[str, Any]]:
            return [w.toolchain for w in await self.workers() if w.compiler and w.toolchain]

        return await producer_of(request).stored(request, self.store, toolchains)

    async def submit_batch(self, requests: Sequence[JobRequest]) -> dict[str, Any]:
        """One job per kernel (each deduplicated on its own) and a batch listing them."""
        for request in requests:
            self.check(request)
        jobs = [await self.submit(request) for request in requests]
        ids = [j.id for j in jobs]
        batch = Batch(id=hashlib.sha256("\n".join(ids).encode()).hexdigest(), jobs=ids)
        await self.records.put_batch(batch)
        return batch_view(batch, list(jobs))

    async def get(self, job_id: str) -> Job | None:
        return await self.records.get(job_id)

    async def get_batch(self, batch_id: str) -> dict[str, Any] | None:
        batch = await self.records.get_batch(batch_id)
        if batch is None:
            return None
        jobs = await asyncio.gather(*(self.records.get(j) for j in batch.jobs))
        return batch_view(batch, list(jobs))

    async def list(self, limit: int = 50, state: JobState | None = None) -> list[Job]:
        return await self.records.list(limit, state)

    async def cancel(self, job_id: str) -> tuple[Job | None, bool]:
        """(the record, whether this call cancelled it); a finished job stays as it is."""
        error = JobError(kind="cancelled", message="cancelled on request")

        def change(job: Job) -> Job | None:
            return None if job.done else job.enter(JobState.cancelled, error=error)

        cancelled = await self.records.update(job_id, change)
        if cancelled is None:
            return await self.records.get(job_id), False
        await self._stop(cancelled)
        return cancelled, True

    async def artifact_path(self, job: Job) -> Path | None:
        """The finished job's zip on disk (None when evicted: submit again to rebuild)."""
        if job.state != JobState.succeeded or job.artifact is None:
            return None
        return await asyncio.to_thread(_path, self.store, job.artifact)

    async def wait(self, job_id: str, timeout: float, poll: float = 0.05) -> Job | None:
        """Poll until the job finishes or `timeout` passes; the last record seen."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            job = await self.get(job_id)
            if job is None or job.done or loop.time() >= deadline:
                return job
            await asyncio.sleep(poll)


def _path(store: ContentStore, ref: ArtifactRef) -> Path | None:
    """The artifact's file if it is there and holds the recorded bytes. Blocking."""
    entry = store.get(ref.key)
    return entry.path if entry is not None and entry.digest == ref.digest else None
