"""`ane-kernels worker --queue ane-macos|ane-linux`: an arq worker running kernel jobs.

At-least-once, nothing lost: arq keeps a job in its queue until a worker finishes it and marks a
running job with an `in-progress` key. Here that key is a lease of ANE_JOB_LEASE_S that the
worker renews while the job runs; a worker that dies (SIGKILL, power loss) stops renewing, the
lease lapses and another worker runs the job again. Outputs are content-addressed, so a second
run is harmless. Graceful stops (SIGINT/SIGTERM) hand running jobs back to the queue at once.

No fork anywhere: arq is asyncio, and the compiler runs as fork+exec'd subprocess, which macOS
allows after CoreFoundation is loaded (a bare fork does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import re
import shutil
import time
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.worker import Retry, Worker, func

from app.compile import select_compiler
from app.jobs.arq_engine import FUNCTION, WORKER, deserialize, redis_settings, serialize
from app.jobs.artifacts import SharedArtifacts
from app.jobs.config import QUEUE_MACOS, QUEUES, JobSettings
from app.jobs.model import JobError, WorkerInfo
from app.jobs.pipeline import Runtime, Transient, fail, give_up, note_retry, run_job
from app.jobs.records import RedisRecords
from app.settings import Settings

log = logging.getLogger("ane.worker")


async def ane_job(ctx: dict[str, Any], job_id: str, run: int) -> str:
    rt: Runtime = ctx["runtime"]
    settings = rt.settings
    attempt = ctx["job_try"]
    stats = ctx["stats"]
    lease = asyncio.create_task(_renew(ctx["redis"], ctx["job_id"], settings.job_lease_s))
    stats["running"] += 1
    try:
        state = await run_job(rt, job_id, run, attempt)
    except Transient as exc:
        if attempt >= settings.job_max_tries:
            await give_up(rt, job_id, run, attempt, str(exc))
            return "failed"
        await note_retry(rt, job_id, run, str(exc))
        raise Retry(defer=settings.backoff(attempt)) from None
    except Exception as exc:  # a bug must not leave the record running forever
        log.exception("job crashed", extra={"job": job_id})
        message = f"{type(exc).__name__}: {exc}"
        await fail(rt, job_id, run, JobError(kind="internal", message=message))
        return "failed"
    finally:
        lease.cancel()
        stats["running"] -= 1
        stats["finished"] += 1
    return state.value if state is not None else "skipped"


async def _renew(redis, arq_job_id: str, lease_s: float) -> None:
    key = in_progress_key_prefix + arq_job_id
    while True:
        await asyncio.sleep(lease_s / 3)
        with contextlib.suppress(Exception):  # a missed renewal costs at most a rerun
            await redis.pexpire(key, int(lease_s * 1000))


class LeasedWorker(Worker):
    """arq's Worker with the in-progress key as a short, renewed lease (arq sets it to the job
    timeout + 10 s, which would leave a dead worker's job stuck for as long)."""

    def __init__(self, *args: Any, lease_s: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.in_progress_timeout_s = lease_s


def worker_id() -> str:
    return f"{platform.node()}:{os.getpid()}"


async def _heartbeat(ctx: dict[str, Any]) -> None:
    rt: Runtime = ctx["runtime"]
    period = rt.settings.worker_heartbeat_s
    compiler = rt.compiler
    toolchain = await compiler.toolchain() if compiler is not None else None
    while True:
        info = WorkerInfo(
            id=rt.worker_id,
            queue=ctx["queue"],
            platform=platform.system().lower(),
            hostname=platform.node(),
            pid=os.getpid(),
            compiler=compiler.name if compiler else None,
            toolchain=toolchain,
            started_at=ctx["started_at"],
            last_seen=time.time(),
            **ctx["stats"],
        )
        with contextlib.suppress(Exception):
            await ctx["redis"].set(
                WORKER + rt.worker_id, info.model_dump_json(), px=int(period * 3000)
            )
        await asyncio.sleep(period)


def _runtime(ctx: dict[str, Any], settings: JobSettings, queue: str) -> Runtime:
    from app.cache.store import ContentStore
    from app.uploads.blobstore import BlobStore

    store = Settings()
    wid = worker_id()
    workdir = store.data_dir / "work" / re.sub(r"[^A-Za-z0-9_.-]", "_", wid)
    shutil.rmtree(workdir, ignore_errors=True)  # this worker's own leftovers only
    workdir.mkdir(parents=True)
    cache = ContentStore(store.cache_dir, store.cache_max_bytes, ".zip")
    blobs = BlobStore(store.blob_dir, store.blob_max_bytes)
    compiler = select_compiler(settings.compiler) if queue == QUEUE_MACOS else None
    records = RedisRecords(ctx["redis"], settings.job_keep_s)
    return Runtime(settings, records, SharedArtifacts(cache), blobs, compiler, wid, workdir)


def build_worker(queue: str, settings: JobSettings | None = None, burst: bool = False) -> Worker:
    settings = settings or JobSettings()
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; one of {', '.join(QUEUES)}")
    if not settings.redis_url:
        raise ValueError("a worker needs ANE_REDIS_URL (or --redis-url)")
    if queue == QUEUE_MACOS and select_compiler(settings.compiler) is None:
        raise ValueError(
            f"the {QUEUE_MACOS} queue compiles, and this machine has no Core ML compiler "
            f"(ANE_COMPILER={settings.compiler}; no xcrun on PATH)"
        )

    async def startup(ctx: dict[str, Any]) -> None:
        ctx["queue"] = queue
        ctx["started_at"] = time.time()
        ctx["stats"] = {"running": 0, "finished": 0}
        ctx["runtime"] = _runtime(ctx, settings, queue)
        ctx["heartbeat"] = asyncio.create_task(_heartbeat(ctx))
        compiler = ctx["runtime"].compiler
        log.info(
            "worker ready",
            extra={"queue": queue, "worker": ctx["runtime"].worker_id,
                   "compiler": compiler.name if compiler else None},
        )  # fmt: skip

    async def shutdown(ctx: dict[str, Any]) -> None:
        task = ctx.get("heartbeat")
        if task is not None:
            task.cancel()
        if "runtime" in ctx:
            with contextlib.suppress(Exception):
                await ctx["redis"].delete(WORKER + ctx["runtime"].worker_id)

    job = func(
        ane_job,
        name=FUNCTION,
        # the pipeline enforces ANE_JOB_TIMEOUT_S itself and reports it; this is the backstop
        timeout=settings.job_timeout_s + 60,
        # attempts are counted by the pipeline (ANE_JOB_MAX_TRIES), which also records why
        max_tries=1000,
        keep_result=settings.job_keep_s,
    )
    return LeasedWorker(
        [job],
        lease_s=settings.job_lease_s,
        queue_name=queue,
        redis_settings=redis_settings(settings.redis_url),
        on_startup=startup,
        on_shutdown=shutdown,
        burst=burst,
        max_jobs=settings.worker_max_jobs,
        poll_delay=settings.worker_poll_s,
        allow_abort_jobs=True,
        job_serializer=serialize,
        job_deserializer=deserialize,
        keep_result=settings.job_keep_s,
        health_check_interval=settings.worker_heartbeat_s,
    )


def healthy(queue: str, settings: JobSettings | None = None) -> bool:
    """Whether a worker for `queue` on this host has a live heartbeat (container healthchecks,
    launchd watchdogs): `ane-kernels worker --queue Q --check`."""
    import redis

    settings = settings or JobSettings()
    if not settings.redis_url:
        return False
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        for key in client.scan_iter(match=f"{WORKER}{platform.node()}:*"):
            raw = client.get(key)
            if raw and WorkerInfo.model_validate_json(raw).queue == queue:
                return True
        return False
    except redis.RedisError:
        return False
    finally:
        client.close()


def run_worker(queue: str, settings: JobSettings | None = None, burst: bool = False) -> None:
    """Run until SIGINT/SIGTERM (or, with `burst`, until the queue is empty)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    build_worker(queue, settings, burst).run()
