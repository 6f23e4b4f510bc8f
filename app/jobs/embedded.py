"""The embedded engine: jobs run by asyncio tasks inside the API process, records in memory.
Their builds run where the API's own do (`run_build`: the build pool), never in a thread here.

The default (no Redis, nothing else to start): `make run` on a fresh machine serves every format
its own compiler allows. Records do not survive a restart; set ANE_REDIS_URL for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import shutil
import time
from pathlib import Path

from app.cache.store import ContentStore
from app.compile import Compiler
from app.compile.runner import RunBuild
from app.jobs.engine import JobEngine
from app.jobs.kinds import producer_of
from app.jobs.lifecycle import Job, JobError, JobRequest, WorkerInfo
from app.jobs.pipeline import Transient, fail, give_up, note_retry, run_job
from app.jobs.records import MemoryRecords
from app.jobs.runtime import Runtime
from app.settings import Settings
from app.uploads.blobstore import BlobStore

log = logging.getLogger("ane.jobs")


class EmbeddedEngine(JobEngine):
    name = "embedded"

    def __init__(
        self,
        settings: Settings,
        store: ContentStore,
        blobs: BlobStore,
        compiler: Compiler | None,
        workdir: Path,
        run_build: RunBuild,
    ):
        super().__init__(settings, store)
        self.records = MemoryRecords(settings.job_keep_s)
        self.worker_id = f"{platform.node()}:{os.getpid()}:embedded"
        self.runtime = Runtime(
            settings, self.records, store, blobs, compiler, self.worker_id, workdir, run_build
        )
        self._queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._running: dict[str, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._started_at = time.time()
        self._finished = 0

    async def start(self) -> None:
        shutil.rmtree(self.runtime.workdir, ignore_errors=True)
        self.runtime.workdir.mkdir(parents=True, exist_ok=True)
        self._tasks = [
            asyncio.create_task(self._loop(), name=f"ane-job-worker-{i}")
            for i in range(self.settings.embedded_workers)
        ]

    async def close(self) -> None:
        for task in [*self._tasks, *self._running.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._running.values(), return_exceptions=True)
        self._tasks.clear()

    def check(self, request: JobRequest) -> None:
        refusal = producer_of(request).refusal(request, self.runtime)
        if refusal is not None:
            raise refusal

    async def _dispatch(self, job: Job) -> None:
        await self._queue.put((job.id, job.run))

    async def _stop(self, job: Job) -> None:
        task = self._running.get(job.id)
        if task is not None:
            task.cancel()  # a queued job is skipped when its turn comes: its record says cancelled

    async def _loop(self) -> None:
        while True:
            job_id, run = await self._queue.get()
            task = asyncio.create_task(self._attempts(job_id, run))
            self._running[job_id] = task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():  # the engine is closing
                    task.cancel()
                    raise
                # otherwise only the job was cancelled: take the next one
            finally:
                self._running.pop(job_id, None)
                self._finished += 1

    async def _attempts(self, job_id: str, run: int) -> None:
        rt, attempt = self.runtime, 1
        while True:
            try:
                await run_job(rt, job_id, run, attempt)
                return
            except Transient as exc:
                if attempt >= self.settings.job_max_tries:
                    await give_up(rt, job_id, run, attempt, str(exc), exc.kind)
                    return
                await note_retry(rt, job_id, run, str(exc))
                await asyncio.sleep(self.settings.backoff(attempt))
                attempt += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not leave the record running forever
                log.exception("job crashed", extra={"job": job_id})
                with contextlib.suppress(Exception):
                    message = f"{type(exc).__name__}: {exc}"
                    await fail(rt, job_id, run, JobError(kind="internal", message=message))
                return

    async def workers(self) -> list[WorkerInfo]:
        compiler = self.runtime.compiler
        return [
            WorkerInfo(
                id=self.worker_id,
                queue="embedded",
                platform=platform.system().lower(),
                hostname=platform.node(),
                pid=os.getpid(),
                compiler=compiler.name if compiler else None,
                toolchain=await compiler.toolchain() if compiler else None,
                started_at=self._started_at,
                last_seen=time.time(),
                running=len(self._running),
                finished=self._finished,
            )
        ]
