"""Compiled requests (.mlmodelc, or an .aimodel compiled for device architectures) answered
synchronously: the compile runs as a job.

The compile happens wherever the job engine runs it (this machine's compiler, or a macOS worker
of the farm). The request waits up to `ANE_SYNC_WAIT_S`; a compile that takes longer is answered
with the job (`Pending`), so the client follows it instead of holding a connection open.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.errors import ErrorKind, FieldError, ServiceError
from app.jobs.engine import JobEngine
from app.jobs.lifecycle import Job, JobState
from app.request import KernelRequest
from app.service.kernels import Pending, Served
from app.uploads.blobstore import BlobStore

# How a failed job reads as an error: the request, the compiler, or the machine at fault.
JOB_FAILURE_KINDS = {
    "spec": ErrorKind.INVALID,
    "compiler": ErrorKind.INVALID,
    "timeout": ErrorKind.TIMEOUT,
    "unavailable": ErrorKind.UNAVAILABLE,
    "storage": ErrorKind.STORAGE,
    "cancelled": ErrorKind.CONFLICT,
}


def job_failure(job: Job) -> FieldError:
    """The error a failed or cancelled job answers a synchronous request with: naming the
    input at fault when the job's error does."""
    error = job.error
    kind = error.kind if error else "cancelled"
    message = error.message if error else f"job {job.id} was cancelled"
    failure = JOB_FAILURE_KINDS.get(kind, ErrorKind.INTERNAL)
    title = "Compile failed" if kind == "compiler" else f"Job {kind}"
    if error is not None and error.field is not None:
        return FieldError(error.field, message, kind=failure, job=job.id, title=title)
    return ServiceError(message, kind=failure, job=job.id, title=title)


class CompiledService:
    def __init__(self, jobs: JobEngine, blobs: BlobStore, wait_s: float):
        self.jobs, self.blobs, self.wait_s = jobs, blobs, wait_s

    async def answer(self, request: KernelRequest) -> Served | Pending:
        request = await asyncio.to_thread(self.blobs.keep_weights, request)
        before = await self.jobs.get(request.key)
        job = await self.jobs.submit(request)
        job = await self.jobs.wait(job.id, self.wait_s) or job
        if job.state == JobState.succeeded:
            path = await self.jobs.artifact_path(job)
            if path is not None:
                # A hit: the job had finished before, or was finished at once from the store.
                cached = JobState.generating.value not in job.stages or (
                    before is not None
                    and before.state == JobState.succeeded
                    and before.run == job.run
                )
                return open_job_artifact(job, path, built=not cached) or Pending(job)
        if job.state in (JobState.failed, JobState.cancelled):
            raise job_failure(job)
        # Still queued or compiling (or succeeded but evicted meanwhile): follow the job.
        return Pending(job)


def open_job_artifact(job: Job, path: Path, built: bool = False) -> Served | None:
    """A succeeded job's artifact (at `path`) as an answer, its file held open so an eviction
    cannot pull it away mid-answer; None when it was evicted before it could be opened."""
    a = job.artifact
    assert a is not None, "a succeeded job records its artifact"
    try:
        f = open(path, "rb")  # noqa: SIM115 - the caller streams and closes it
    except FileNotFoundError:
        return None
    return Served(
        a.digest, a.filename, job.request.op, a.size, built, file=f, preflight=a.preflight
    )
