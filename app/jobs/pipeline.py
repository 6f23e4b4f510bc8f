"""One attempt at one job, the same in the embedded engine and in an arq worker:

    record queued -> generating: build the program (weights from the shared blob store)
      mil / mlpackage: package -> publish into the artifact cache       -> succeeded
      mlmodelc: toolchain -> cached compile? -> compiling -> compile, placement -> publish
                                                                          -> succeeded
      aimodel with architectures: the same, the compile being `xcrun coreai-build` per
      architecture (app/compile/aimodelc.py), on a macOS worker
Model errors (bad spec, compiler rejection, timeout) fail the job with their own message and are
not retried; `Transient` errors (a compiler killed by a signal, a storage hiccup) are raised
to the engine, which retries with backoff up to ANE_JOB_MAX_TRIES. A record that was cancelled
or resubmitted meanwhile is left alone: every write checks the record's run and state first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import artifacts
from app.cache.faults import ARTIFACT_STORE, BLOB_STORE, WORK_DIR, is_full, storage_fault
from app.cache.store import ContentStore
from app.compile import CompileFailure, Compiler, CompilerUnavailable
from app.compile.aimodelc import build_asset, compile_asset_zip
from app.compile.coreai_build import CoreAIBuild
from app.compile.kernel import build_package, compile_package_zip
from app.compile.runner import RunBuild, runs_alone
from app.errors import ErrorKind, FieldError
from app.jobs.kit_jobs import check_on_device, produce_kit
from app.jobs.model import TERMINAL, Job, JobError, JobState, artifact_ref
from app.jobs.records import Records
from app.kits.job import DeviceCheckRequest, ModelRequest
from app.settings import Settings
from app.uploads.blobstore import BlobStore

log = logging.getLogger("ane.jobs")


class Transient(Exception):
    """Worth another attempt, maybe on another worker. `kind` is the job error's kind should
    the job give up after it."""

    def __init__(self, message: str, kind: str = "gave_up"):
        super().__init__(message)
        self.kind = kind


class _Abandoned(Exception):
    """The record moved on (cancelled, or resubmitted as a new run): stop quietly."""


@dataclass
class Runtime:
    settings: Settings
    records: Records
    store: ContentStore  # the artifact cache, shared with the API through the data volume
    blobs: BlobStore  # uploaded weights, likewise shared
    compiler: Compiler | None
    worker_id: str
    workdir: Path  # this worker's scratch space, on the same volume as the cache
    # Where builds run: in the API process its build pool, never a thread of its own.
    run_build: RunBuild
    # Compiles an .aimodel for device architectures (needs xcrun: macOS 27 with Xcode 27).
    device_compiler: CoreAIBuild = field(default_factory=CoreAIBuild)


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


async def give_up(
    rt: Runtime, job_id: str, run: int, attempts: int, last: str | None, kind: str = "gave_up"
) -> None:
    await asyncio.to_thread(rt.store.sweep_tmp)  # what its dead workers left half-written
    why = f"last error: {last}" if last else "its worker stopped before finishing each time"
    message = f"gave up after {attempts} attempts (ANE_JOB_MAX_TRIES); {why}"
    await fail(rt, job_id, run, JobError(kind=kind, message=message))


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
    if attempt > 1:  # a worker that died on an earlier attempt may have left a partial kit
        await asyncio.to_thread(rt.store.sweep_tmp)
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
    # A kit job's own limit, derived from its checkpoint when submitted; a kernel's the setting.
    limit = started.limits.timeout_s if started.limits else rt.settings.job_timeout_s
    try:
        async with asyncio.timeout(limit) as deadline:
            changes = await _produce(rt, started)
    except _Abandoned:
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
    if isinstance(job.request, DeviceCheckRequest):
        return await check_on_device(
            rt.store, rt.run_build, job.request, rt.settings.device_check_runtime
        )
    if isinstance(job.request, ModelRequest):

        async def program(name: str) -> None:  # a stage per program as the kit is built
            moved = await rt.records.update(
                job.id,
                _live(
                    job.run,
                    lambda j: j.model_copy(
                        update={
                            "stages": {**j.stages, name: time.time()},
                            "updated_at": time.time(),
                        }
                    ),
                ),
            )
            if moved is None:
                raise _Abandoned()

        return await produce_kit(
            rt.store, rt.blobs, rt.workdir, rt.run_build, job.id, job.request, program
        )
    request = await asyncio.to_thread(rt.blobs.locate, job.request)
    limits = artifacts.Limits.of(rt.settings)
    alone = runs_alone(request.weight_bytes)
    if not request.compiled:
        if not request.bypass_cache:
            found = await asyncio.to_thread(rt.store.get, job.id)
            if found is not None:
                return {"artifact": artifact_ref(found)}
        # Built and zipped exactly as the synchronous path does.
        location = rt.store.location
        build = artifacts.build_and_publish
        stored = await rt.run_build(build, request, location, job.id, limits, alone=alone)
        return {"artifact": artifact_ref(rt.store.adopt(stored.published))}

    compiler = rt.device_compiler if request.architectures is not None else rt.compiler
    if compiler is None:
        raise CompilerUnavailable(
            f"worker {rt.worker_id} has no compiler backend (ANE_COMPILER={rt.settings.compiler})"
        )
    toolchain = await compiler.toolchain()
    # The compiled artifact's key adds the toolchain: a new Xcode compiles afresh.
    key = request.compiled_key(toolchain)
    if not request.bypass_cache:
        found = await asyncio.to_thread(rt.store.get, key)
        if found is not None:
            return {
                "artifact": artifact_ref(found),
                "placement": found.meta.get("placement"),
                "toolchain": toolchain,
                "conformance": found.meta.get("conformance"),
            }

    async def compiling() -> None:
        moved = await rt.records.update(
            job.id, _live(job.run, lambda j: j.enter(JobState.compiling))
        )
        if moved is None:
            raise _Abandoned()

    workdir = _scratch(rt)
    timeout_s = rt.settings.compile_timeout_s
    meta = {
        "op": request.op,
        "format": request.format,
        "toolchain": toolchain,
        "filename": request.filename,
    }
    try:
        if request.architectures is not None:
            asset = await rt.run_build(build_asset, request, limits, workdir, alone=alone)
            aimodelc = await compile_asset_zip(
                asset,
                rt.device_compiler,
                workdir,
                list(request.architectures),
                timeout_s,
                on_compiling=compiling,
            )
            meta |= {
                "digest": aimodelc.digest,
                "preflight": asset.preflight,
                "architectures": list(request.architectures),
            }
            entry = await asyncio.to_thread(rt.store.publish, key, aimodelc.zip_path, meta)
            return {"artifact": artifact_ref(entry), "toolchain": toolchain}
        package = await rt.run_build(build_package, request, limits, workdir, alone=alone)
        compiled = await compile_package_zip(
            package,
            rt.compiler,
            workdir,
            timeout_s,
            run=rt.run_build,
            on_compiling=compiling,
        )
        placement = compiled.placement.get("summary") or {
            "available": False,
            "reason": compiled.placement.get("reason"),
        }
        meta |= {
            "placement": placement,
            "conformance": compiled.conformance,
            "digest": compiled.digest,
            "preflight": package.preflight,
        }
        entry = await asyncio.to_thread(rt.store.publish, key, compiled.zip_path, meta)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "artifact": artifact_ref(entry),
        "placement": placement,
        "toolchain": toolchain,
        "conformance": compiled.conformance,
    }


def _scratch(rt: Runtime) -> Path:
    path = rt.workdir / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path
