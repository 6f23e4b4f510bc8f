"""One attempt at one job, the same in the embedded engine and in an arq worker:

    record queued -> generating: build the program (weights from the shared blob store)
      mil / mlpackage: package -> publish into the artifact cache       -> succeeded
      mlmodelc: toolchain -> cached compile? -> compiling -> compile, placement -> publish
                                                                          -> succeeded
Model errors (bad spec, compiler rejection, timeout) fail the job with their own message and are
not retried; `Transient` errors (a compiler killed by a signal, a storage hiccup) are raised
to the engine, which retries with backoff up to ANE_JOB_MAX_TRIES. A record that was cancelled
or resubmitted meanwhile is left alone: every write checks the record's run and state first.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.compile import CompileFailure, Compiler, CompilerUnavailable, compile_kernel_zip
from app.jobs.artifacts import SharedArtifacts
from app.jobs.config import JobSettings
from app.jobs.model import TERMINAL, Job, JobError, JobSpec, JobState
from app.jobs.records import Records
from app.jobs.spec import resolve_weights
from app.kernels import KernelBuild, KernelSpecError, build_kernel
from app.packaging import write_kernel_zip
from app.packaging.digesting import DigestingWriter
from app.service.problems import Problem

log = logging.getLogger("ane.jobs")


class Transient(Exception):
    """Worth another attempt, maybe on another worker."""


class _Abandoned(Exception):
    """The record moved on (cancelled, or resubmitted as a new run): stop quietly."""


@dataclass
class Runtime:
    settings: JobSettings
    records: Records
    artifacts: SharedArtifacts
    blobs: Any  # app.uploads.blobstore.BlobStore
    compiler: Compiler | None
    worker_id: str
    workdir: Path  # this worker's scratch space, on the same volume as the cache


def _live(run: int, change: Callable[[Job], Job]) -> Callable[[Job], Job | None]:
    """Apply `change` only to the same run of a job that has not finished."""

    def apply(job: Job) -> Job | None:
        if job.run != run or job.state in TERMINAL:
            return None
        return change(job)

    return apply


async def finish(rt: Runtime, job_id: str, run: int, state: JobState, **changes: Any) -> bool:
    done = await rt.records.update(job_id, _live(run, lambda j: j.enter(state, **changes)))
    return done is not None


async def fail(rt: Runtime, job_id: str, run: int, error: JobError) -> bool:
    log.info("job failed", extra={"job": job_id, "kind": error.kind, "error": error.message})
    return await finish(rt, job_id, run, JobState.failed, error=error)


async def give_up(rt: Runtime, job_id: str, run: int, attempts: int, last: str | None) -> None:
    why = f"last error: {last}" if last else "its worker stopped before finishing each time"
    message = f"gave up after {attempts} attempts (ANE_JOB_MAX_TRIES); {why}"
    await fail(rt, job_id, run, JobError(kind="gave_up", message=message))


async def note_retry(rt: Runtime, job_id: str, run: int, message: str) -> None:
    await rt.records.update(
        job_id, _live(run, lambda j: j.enter(JobState.queued, last_error=message, worker=None))
    )


async def run_job(rt: Runtime, job_id: str, run: int, attempt: int) -> JobState | None:
    """Run one attempt; returns the state it left the job in (None: nothing to do)."""
    job = await rt.records.get(job_id)
    if job is None or job.run != run or job.done:
        return job.state if job is not None and job.run == run else None
    if attempt > rt.settings.job_max_tries:
        await give_up(rt, job_id, run, attempt - 1, job.last_error)
        return JobState.failed
    started = await rt.records.update(
        job_id,
        _live(
            run,
            lambda j: j.enter(
                JobState.generating, worker=rt.worker_id, attempts=attempt, error=None
            ),
        ),
    )
    if started is None:
        return None
    limit = rt.settings.job_timeout_s
    try:
        async with asyncio.timeout(limit) as deadline:
            changes = await _produce(rt, started)
    except _Abandoned:
        return None
    except TimeoutError:
        if not deadline.expired():
            raise Transient("a storage or network operation timed out") from None
        message = f"the job exceeded ANE_JOB_TIMEOUT_S={limit:g}s and was stopped"
        await fail(rt, job_id, run, JobError(kind="timeout", message=message))
        return JobState.failed
    except KernelSpecError as exc:
        await fail(rt, job_id, run, JobError(kind="spec", message=exc.message, field=exc.field))
        return JobState.failed
    except Problem as exc:
        await fail(rt, job_id, run, JobError(kind="spec", message=exc.detail, field=exc.field))
        return JobState.failed
    except CompileFailure as exc:
        if exc.retryable:
            raise Transient(exc.message) from None
        await fail(rt, job_id, run, JobError(kind=exc.kind, message=exc.message))
        return JobState.failed
    except OSError as exc:
        raise Transient(f"storage error: {exc}") from None
    if await finish(rt, job_id, run, JobState.succeeded, error=None, last_error=None, **changes):
        return JobState.succeeded
    return None


async def _produce(rt: Runtime, job: Job) -> dict[str, Any]:
    spec = job.spec
    arrays = await asyncio.to_thread(resolve_weights, spec, rt.blobs)
    if spec.format != "mlmodelc":
        if not spec.bypass_cache:
            found = await asyncio.to_thread(rt.artifacts.find, job.id)
            if found is not None:
                return {"artifact": found[0]}
        return {"artifact": await asyncio.to_thread(_package, rt, spec, job.id, arrays)}

    if rt.compiler is None:
        raise CompilerUnavailable(
            f"worker {rt.worker_id} has no Core ML compiler (ANE_COMPILER); mlmodelc jobs need "
            "a macOS worker with Xcode"
        )
    toolchain = await rt.compiler.toolchain()
    # The compiled artifact's key adds the toolchain: a new Xcode compiles afresh.
    key = spec.key(extra={"toolchain": toolchain})
    if not spec.bypass_cache:
        found = await asyncio.to_thread(rt.artifacts.find, key)
        if found is not None:
            ref, meta = found
            return {"artifact": ref, "placement": meta.get("placement"), "toolchain": toolchain}
    build = await asyncio.to_thread(_build, spec, arrays)
    extra = await asyncio.to_thread(_extra_entries, spec, build)

    async def compiling() -> None:
        moved = await rt.records.update(
            job.id, _live(job.run, lambda j: j.enter(JobState.compiling))
        )
        if moved is None:
            raise _Abandoned()

    workdir = _scratch(rt)
    try:
        compiled = await compile_kernel_zip(
            build,
            rt.compiler,
            workdir,
            rt.settings.compile_timeout_s,
            on_compiling=compiling,
            extra_entries=extra,
        )
        placement = compiled.placement.get("summary") or {
            "available": False,
            "reason": compiled.placement.get("reason"),
        }
        meta = {"op": spec.op, "format": spec.format, "placement": placement}
        ref = await asyncio.to_thread(
            rt.artifacts.publish,
            key,
            compiled.zip_path,
            spec.filename,
            {**meta, "toolchain": toolchain},
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"artifact": ref, "placement": placement, "toolchain": toolchain}


def _build(spec: JobSpec, arrays: dict) -> KernelBuild:
    return build_kernel(spec.op, spec.params, arrays, target=spec.target, name=spec.name)


def _extra_entries(spec: JobSpec, build: KernelBuild) -> list:
    if not spec.verify:
        return []
    from app.reference.verify import verification_entry

    return [verification_entry(build)]  # KernelSpecError("verify", ...) when too large


def _package(rt: Runtime, spec: JobSpec, key: str, arrays: dict):
    """Build and zip a mil / mlpackage artifact, exactly as the synchronous path does."""
    build = _build(spec, arrays)
    extra = _extra_entries(spec, build)
    # Uploaded float16/float32 bytes are packaged as they are, so their digest stands.
    digests = {n: w.digest for n, w in spec.weights.items() if w.dtype in ("float16", "float32")}
    workdir = _scratch(rt)
    try:
        path = workdir / spec.filename
        with path.open("wb") as f, DigestingWriter(f) as out:
            write_kernel_zip(build, out, spec.format, digests=digests, extra_entries=extra)
            digest = out.digest()
        meta = {"op": spec.op, "format": spec.format}
        return rt.artifacts.publish(key, path, spec.filename, meta, digest)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _scratch(rt: Runtime) -> Path:
    path = rt.workdir / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path
