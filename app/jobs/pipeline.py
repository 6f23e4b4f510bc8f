"""One attempt at one job, the same in the embedded engine and in an arq worker:

    record queued -> generating -> the request's producer runs it (app/jobs/kinds.py: a
    kernel's build, package and compile; a kit's build; a device check) -> succeeded

Model errors (bad spec, compiler rejection, timeout) fail the job with their own message and are
not retried; `Transient` errors (a compiler killed by a signal, a storage hiccup) are raised
to the engine, which retries with backoff up to ANE_JOB_MAX_TRIES. A record that was cancelled
or resubmitted meanwhile is left alone: every write checks the record's run and state first.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from app.cache.faults import ARTIFACT_STORE, BLOB_STORE, WORK_DIR, is_full, storage_fault
from app.compile import CompileFailure
from app.errors import ErrorKind, FieldError
from app.jobs.kinds import producer_of
from app.jobs.lifecycle import Job, JobError, JobState
from app.jobs.runtime import Abandoned, Runtime, live

log = logging.getLogger("ane.jobs")


class Transient(Exception):
    """Worth another attempt, maybe on another worker. `kind` is the job error's kind should
    the job give up after it."""

    def __init__(self, message: str, kind: str = "gave_up"):
        super().__init__(message)
        self.kind = kind


async def finish(rt: Runtime, job_id: str, run: int, state: JobState, **changes: Any) -> bool:
    done = await rt.records.update(job_id, live(run, lambda j: j.enter(state, **changes)))
    return done is not None


async def fail(rt: Runtime, job_id: str, run: int, error: JobError) -> bool:
    log.info("job failed", extra={"job": job_id, "kind": error.kind, "error": error.message})
    return await finish(rt, job_id, run, JobState.failed, error=error)


async def give_up(
    rt: Runtime, job_id: str, run: int, attempts: int, last: str | None, kind: str = "gave_up"
) -> None:
    await asyncio.to_thread(rt.store.sweep_tmp)  # what its dead workers left half-written
    why = f"last error: {last}" if last else "its worker stopped before finishing each time"
    message = f"gave up after {attempts} attempts (ANE_JOB_MAX_TRIES); {why}"
    await fail(rt, job_id, run, JobError(kind=kind, message=message))


async def note_retry(rt: Runtime, job_id: str, run: int, message: str) -> None:
    await rt.records.update(
        job_id, live(run, lambda j: j.enter(JobState.queued, last_error=message, worker=None))
    )


async def run_job(rt: Runtime, job_id: str, run: int, attempt: int) -> JobState | None:
    """Run one attempt; returns the state it left the job in (None: nothing to do)."""
    job = await rt.records.get(job_id)
    if job is None or job.run != run or job.done:
        return job.state if job is not None and job.run == run else None
    if attempt > rt.settings.job_max_tries:
        await give_up(rt, job_id, run, attempt - 1, job.last_error)
        return JobState.failed
    if attempt > 1:  # a worker that died on an earlier attempt may have left a partial kit
        await asyncio.to_thread(rt.store.sweep_tmp)
    started = await rt.records.update(
        job_id,
        live(
            run,
            lambda j: j.enter(
                JobState.generating, worker=rt.worker_id, attempts=attempt, error=None
            ),
        ),
    )
    if started is None:
        return None
    # A kit job's own limit, derived from its checkpoint when submitted; a kernel's the setting.
    limit = started.limits.timeout_s if started.limits else rt.settings.job_timeout_s
    try:
        async with asyncio.timeout(limit) as deadline:
            changes = await _produce(rt, started)
    except Abandoned:
        return None
    except TimeoutError:
        if not deadline.expired():
            raise Transient("a storage or network operation timed out") from None
        message = (
            started.limits.timeout_message()
            if started.limits
            else f"the job exceeded ANE_JOB_TIMEOUT_S={limit:g}s and was stopped"
        )
        await fail(rt, job_id, run, JobError(kind="timeout", message=message))
        return JobState.failed
    except FieldError as exc:
        if "store" in exc.extra:  # the machine's storage failed, not the request
            raise await _storage_transient(rt, exc) from None
        if exc.kind == ErrorKind.UNAVAILABLE:  # the build pool is full, or lost its worker
            raise Transient(exc.message, kind="unavailable") from None
        await fail(rt, job_id, run, JobError(kind="spec", message=exc.message, field=exc.field))
        return JobState.failed
    except CompileFailure as exc:
        if exc.retryable:
            raise Transient(exc.message) from None
        await fail(rt, job_id, run, JobError(kind=exc.kind, message=exc.message))
        return JobState.failed
    except OSError as exc:
        fault = storage_fault(exc, *_store_of(rt, exc))
        if fault is not None:
            raise await _storage_transient(rt, fault) from None
        raise Transient(f"storage error: {exc}") from None
    if await finish(rt, job_id, run, JobState.succeeded, error=None, last_error=None, **changes):
        return JobState.succeeded
    return None


def _store_of(rt: Runtime, exc: OSError) -> tuple[str, Path]:
    """Which of the worker's directories a failed file operation wrote into."""
    name = Path(os.fsdecode(exc.filename)) if exc.filename is not None else None
    for store, root in (
        (WORK_DIR, rt.workdir),
        (ARTIFACT_STORE, rt.store.root),
        (BLOB_STORE, rt.blobs.store.root),
    ):
        if name is not None and name.is_relative_to(root):
            return store, root
    return WORK_DIR, rt.workdir


async def _storage_transient(rt: Runtime, fault: FieldError) -> Transient:
    """A storage fault as a retry: a full disk first gets the room the job needed from the
    artifact cache's least recently used entries, so the next attempt may fit."""
    log.warning("job storage fault", extra={"error": fault.message, **fault.extra})
    full = is_full(fault)
    needed = fault.extra.get("needed_bytes")
    if full and needed:
        await asyncio.to_thread(rt.store.make_room, needed)
    return Transient(fault.message, kind="storage" if full else "unavailable")


async def _produce(rt: Runtime, job: Job) -> dict[str, Any]:
    return await producer_of(job.request).produce(job.request, rt, job)
