"""`ane-kernels worker --queue ane-macos|ane-linux`: an arq worker running kernel jobs.

At-least-once, nothing lost: arq keeps a job in its queue until a worker finishes it and marks a
running job with an `in-progress` key. Here that key is a lease of ANE_JOB_LEASE_S that the
worker renews while the job runs; a worker that dies (SIGKILL, power loss) stops renewing, the
lease lapses and another worker runs the job again. Outputs are content-addressed, so a second
run is harmless. Graceful stops (SIGINT/SIGTERM) hand running jobs back to the queue at once.

A broker outage never ends a worker (app/jobs/arq_worker.py): it reconnects with backoff, its
running jobs go on and record their results when the broker is back, and its heartbeat reports
the outages it rode out (`broker` in /v1/workers).

No fork anywhere: arq is asyncio, and the compiler runs as fork+exec'd subprocess, which macOS
allows after CoreFoundation is loaded (a bare fork does not).
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
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.worker import Retry, Worker, func

from app.compile import Compiler, select_compiler
from app.compile.linux import NAME as LINUX_COMPILER
from app.compile.runner import in_thread
from app.core.files import Stopping
from app.core.tempnames import owner_gone, temp_name
from app.jobs.arq_engine import FUNCTION, WORKER
from app.jobs.arq_worker import FarmWorker
from app.jobs.broker import broker_client, deserialize, is_broker_fault, serialize, where
from app.jobs.lifecycle import JobError, WorkerInfo
from app.jobs.outage import BrokerLink, PatientRecords
from app.jobs.pipeline import Transient, fail, give_up, note_retry, run_job
from app.jobs.queues import QUEUE_MACOS, QUEUES
from app.jobs.records import RedisRecords
from app.jobs.runtime import Runtime
from app.kits.limits import longest_timeout_s
from app.settings import Settings
from app.storage import artifact_store, blob_store

log = logging.getLogger("ane.worker")


async def ane_job(ctx: dict[str, Any], job_id: str, run: int) -> str:
    rt: Runtime = ctx["runtime"]
    settings = rt.settings
    attempt = ctx["job_try"]
    stats = ctx["stats"]
    lease = asyncio.create_task(
        _renew(ctx["redis"], ctx["broker"], ctx["job_id"], settings.job_lease_s)
    )
    stats["running"] += 1
    try:
        state = await run_job(rt, job_id, run, attempt)
    except Stopping as exc:
        # The worker is stopping (SIGTERM): arq can hand it the job it just gave back before it
        # closes, and the build refuses to start a file. That is no fault of the job's: it goes
        # back to the queue, for this worker's successor or another, and is not failed.
        await note_retry(rt, job_id, run, str(exc))
        raise Retry(defer=0) from None
    except Transient as exc:
        if attempt >= settings.job_max_tries:
            await give_up(rt, job_id, run, attempt, str(exc), exc.kind)
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


async def _renew(redis, link: BrokerLink, arq_job_id: str, lease_s: float) -> None:
    key = in_progress_key_prefix + arq_job_id
    while True:
        await asyncio.sleep(lease_s / 3)
        if not link.reachable:
            continue
        # SET, not PEXPIRE: a broker restarted from its append-only file has dropped the lease
        # that lapsed during the outage, and the job is still running here.
        with contextlib.suppress(Exception):  # a missed renewal costs at most a rerun
            await redis.set(key, b"1", px=int(lease_s * 1000))


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
            broker=ctx["broker"].status(),
            **ctx["stats"],
        )
        if ctx["broker"].reachable:
            with contextlib.suppress(Exception):  # the poll loop notices outages
                await ctx["redis"].set(
                    WORKER + rt.worker_id, info.model_dump_json(), px=int(period * 3000)
                )
        await asyncio.sleep(period)


def _scratch(root: Path) -> Path:
    """A fresh scratch directory for this worker's compiles, named for it; those of this host's
    workers that have ended (killed before they could clean up) are removed first. The data
    volume may be shared: other hosts' and running workers' directories are left alone."""
    root.mkdir(parents=True, exist_ok=True)
    for ended in (d for d in root.iterdir() if owner_gone(d.name)):
        shutil.rmtree(ended, ignore_errors=True)
    workdir = root / temp_name("")
    workdir.mkdir()
    return workdir


def _runtime(ctx: dict[str, Any], settings: Settings, compiler: Compiler | None) -> Runtime:
    wid = worker_id()
    workdir = _scratch(settings.data_dir / "work")
    cache, blobs = artifact_store(settings), blob_store(settings)
    # A job's record writes wait out broker outages: the job goes on when the broker is back.
    records = PatientRecords(RedisRecords(ctx["redis"], settings.job_keep_s), ctx["broker"])
    # A worker process serves nothing but its jobs: its builds run in a thread of its own.
    return Runtime(settings, records, cache, blobs, compiler, wid, workdir, in_thread)


def build_worker(queue: str, settings: Settings | None = None, burst: bool = False) -> Worker:
    settings = settings or Settings()
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; one of {', '.join(QUEUES)}")
    if not settings.redis_url:
        raise ValueError("a worker needs ANE_REDIS_URL (or --redis-url)")
    # Chosen once: the queue check below and every job use the same compiler (and its probed
    # toolchain, which the xcrun backend keeps per instance).
    compiler = select_compiler(settings.compiler, settings.mlmodelc_profile)
    if queue == QUEUE_MACOS and (compiler is None or compiler.name == LINUX_COMPILER):
        raise ValueError(
            f"the {QUEUE_MACOS} queue compiles with Apple's tools (Core ML's placement report, "
            f"Core AI's device compile), and this machine has none (ANE_COMPILER="
            f"{settings.compiler}; no xcrun on PATH)"
        )

    async def startup(ctx: dict[str, Any]) -> None:
        if "runtime" in ctx:  # arq's start-up ran again after an outage cut it short
            return
        ctx["queue"] = queue
        ctx["started_at"] = time.time()
        ctx["stats"] = {"running": 0, "finished": 0}
        ctx["runtime"] = _runtime(ctx, settings, compiler)
        ctx["heartbeat"] = asyncio.create_task(_heartbeat(ctx))
        log.info(
            "worker ready",
            extra={
                "queue": queue,
                "worker": ctx["runtime"].worker_id,
                "compiler": compiler.name if compiler else None,
            },
        )

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
        # the pipeline enforces each job's own limit (its record's, or ANE_JOB_TIMEOUT_S) and
        # reports it; this is the backstop, past the longest limit these settings give a job
        timeout=longest_timeout_s(settings) + 60,
        # attempts are counted by the pipeline (ANE_JOB_MAX_TRIES), which also records why
        max_tries=1000,
        keep_result=settings.job_keep_s,
    )
    redis = broker_client(settings.redis_url, settings, queue)
    link = BrokerLink(
        redis, where(settings.redis_url), settings.broker_retry_s, settings.broker_retry_max_s
    )
    return FarmWorker(
        [job],
        lease_s=settings.job_lease_s,
        link=link,
        queue_name=queue,
        redis_pool=redis,
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


def check(queue: str, settings: Settings | None = None) -> tuple[bool, str]:
    """Whether a worker for `queue` on this host has a live heartbeat, and what was found
    (container healthchecks, launchd watchdogs): `ane-kernels worker --queue Q --check`. An
    unreachable broker is said so, naming it."""
    import redis

    settings = settings or Settings()
    if not settings.redis_url:
        return False, "no broker configured (ANE_REDIS_URL or --redis-url)"
    broker = where(settings.redis_url)
    client = redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.broker_timeout_s,
        socket_connect_timeout=settings.broker_timeout_s,
    )
    try:
        for key in client.scan_iter(match=f"{WORKER}{platform.node()}:*"):
            raw = client.get(key)  # typed for the async client too: narrowed to what it reads
            if (
                isinstance(raw, bytes | str)
                and raw
                and WorkerInfo.model_validate_json(raw).queue == queue
            ):
                return True, f"a {queue} worker on {platform.node()} heartbeats in {broker}"
        return False, f"no {queue} worker on {platform.node()} heartbeats in {broker}"
    except redis.RedisError as exc:
        if is_broker_fault(exc):
            raise BrokerUnreachable(f"the broker {broker} is unreachable: {exc}") from None
        raise
    finally:
        client.close()


class BrokerUnreachable(Exception):
    """`check` could not ask the broker."""
