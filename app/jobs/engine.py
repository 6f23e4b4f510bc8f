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
from pathlib import Path
from typing import Any

from app.jobs.artifacts import SharedArtifacts
from app.jobs.config import QUEUE_LINUX, QUEUE_MACOS, JobSettings
from app.jobs.model import Batch, Job, JobError, JobSpec, JobState, WorkerInfo, batch_view
from app.jobs.records import Records


def queue_for(spec: JobSpec) -> str:
    return QUEUE_MACOS if spec.format == "mlmodelc" else QUEUE_LINUX


class JobEngine(ABC):
    name: str
    records: Records

    def __init__(self, settings: JobSettings, artifacts: SharedArtifacts):
        self.settings, self.artifacts = settings, artifacts

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

    def check(self, spec: JobSpec) -> None:
        """Raise if this engine can never run `spec` (e.g. mlmodelc without any compiler)."""
        return None

    # -- shared --------------------------------------------------------------------------------
    def _replaceable(self, spec: JobSpec, old: Job) -> bool:
        if old.state in (JobState.failed, JobState.cancelled):
            return True
        if old.state == JobState.succeeded:
            gone = old.artifact is None or not self.artifacts.exists(old.artifact)
            return spec.bypass_cache or gone
        return False  # queued or running: join it

    async def submit(self, spec: JobSpec) -> Job:
        """The job for `spec`: an existing one (same key, not failed) or a new one."""
        self.check(spec)
        job = Job(id=spec.key(), queue=queue_for(spec), spec=spec).enter(JobState.queued)
        record, created = await self.records.claim(job, lambda old: self._replaceable(spec, old))
        if created:
            await self._dispatch(record)
        elif not record.done:
            await self._redispatch(record)
        return record

    async def submit_batch(self, specs: list[JobSpec]) -> dict[str, Any]:
        """One job per kernel (each deduplicated on its own) and a batch listing them."""
        for spec in specs:
            self.check(spec)
        jobs = [await self.submit(spec) for spec in specs]
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
        return await asyncio.to_thread(self.artifacts.path, job.artifact)

    async def wait(self, job_id: str, timeout: float, poll: float = 0.05) -> Job | None:
        """Poll until the job finishes or `timeout` passes; the last record seen."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            job = await self.get(job_id)
            if job is None or job.done or loop.time() >= deadline:
                return job
            await asyncio.sleep(poll)
