"""The farm engine: job records in Redis, jobs queued on arq, run by `ane-kernels worker`.

    API: record (ane:job:<key>) -> arq enqueue(_job_id=<key>, _queue_name=ane-macos|ane-linux)
    worker: arq picks it up -> app.jobs.farm_worker.ane_job -> pipeline.run_job

arq's `_job_id` is the job key (suffixed `-r<run>` when a failed job is submitted again), so
identical submissions in flight are one arq job even across API instances. Everything lives in
Redis: a new API process (or a restarted one) sees the same jobs.

When Redis does not answer, every operation raises the broker's 503 (`broker_unavailable`,
with Retry-After) instead of a connection error, and counts it (`on_broker_error`). A broker
that came back without its data may still hold an arq result for a job whose record is gone;
`_dispatch` clears such a stale result, so a job submitted again runs instead of waiting for
ever behind it.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from typing import Any

from arq.connections import ArqRedis
from arq.constants import abort_jobs_ss, result_key_prefix
from arq.utils import timestamp_ms

from app.cache.store import ContentStore
from app.jobs.broker import broker_client, broker_unavailable, is_broker_fault, where
from app.jobs.engine import JobEngine
from app.jobs.lifecycle import Job, WorkerInfo
from app.jobs.records import PREFIX, RedisRecords
from app.settings import Settings

FUNCTION = "ane_job"
WORKER = PREFIX + "worker:"  # heartbeat keys: ane:worker:<id>, with a TTL


def arq_id(job: Job) -> str:
    return job.id if job.run == 0 else f"{job.id}-r{job.run}"


def _through_broker(method):
    """An engine operation whose broker faults become the broker's 503."""

    @functools.wraps(method)
    async def call(self: ArqEngine, *args: Any, **kwargs: Any):
        try:
            return await method(self, *args, **kwargs)
        except Exception as exc:
            if not is_broker_fault(exc):
                raise
            self.on_broker_error(method.__name__)
            assert self.settings.redis_url
            raise broker_unavailable(
                self.settings.redis_url, exc, self.settings.retry_after_seconds
            ) from None

    return call


class ArqEngine(JobEngine):
    name = "arq"

    def __init__(
        self,
        settings: Settings,
        store: ContentStore,
        redis: ArqRedis | None = None,
        on_broker_error: Callable[[str], None] = lambda operation: None,
    ):
        super().__init__(settings, store)
        if redis is None and not settings.redis_url:
            raise ValueError("ArqEngine needs ANE_REDIS_URL (or a connection)")
        self.redis = redis
        self._own_connection = redis is None
        self.on_broker_error = on_broker_error

    async def start(self) -> None:
        # No connection yet: the API starts, and serves what needs no broker, while it is away.
        if self.redis is None:
            assert self.settings.redis_url
            self.redis = broker_client(self.settings.redis_url, self.settings)
        self.records = RedisRecords(self.redis, self.settings.job_keep_s)

    async def close(self) -> None:
        if self.redis is not None and self._own_connection:
            await self.redis.aclose()
            self.redis = None

    async def unready(self) -> str | None:
        assert self.redis is not None
        try:
            await self.redis.ping()
        except Exception as exc:
            if not is_broker_fault(exc):
                raise
            self.on_broker_error("ping")
            broker = where(self.settings.redis_url or "")
            return f"the job broker (Redis at {broker}) is unreachable: {exc}"
        return None

    submit = _through_broker(JobEngine.submit)
    submit_batch = _through_broker(JobEngine.submit_batch)
    get = _through_broker(JobEngine.get)
    get_batch = _through_broker(JobEngine.get_batch)
    list = _through_broker(JobEngine.list)
    cancel = _through_broker(JobEngine.cancel)

    async def _dispatch(self, job: Job) -> None:
        assert self.redis is not None
        queued = await self.redis.enqueue_job(
            FUNCTION, job.id, job.run, _job_id=arq_id(job), _queue_name=job.queue
        )
        if queued is not None:
            return
        # arq refused: it holds a job of that id, queued, running, or finished with its result
        # kept. One in the queue (running jobs stay there until done) will run this record.
        # Otherwise the result is stale (a job whose record the broker lost, finished since):
        # clear it and queue the job again.
        if await self.redis.zscore(job.queue, arq_id(job)) is None:
            await self.redis.delete(result_key_prefix + arq_id(job))
            await self.redis.enqueue_job(
                FUNCTION, job.id, job.run, _job_id=arq_id(job), _queue_name=job.queue
            )

    async def _redispatch(self, job: Job) -> None:
        # Joins an unfinished record: a no-op while arq has the job queued or running; it
        # re-queues a job whose enqueue was lost (an API that died between storing the record
        # and queueing, a broker that lost its queue).
        await self._dispatch(job)

    async def _stop(self, job: Job) -> None:
        # arq's own abort: a running job's task is cancelled (its compiler process killed), a
        # queued one is dropped when a worker reaches it. Workers run with allow_abort_jobs.
        assert self.redis is not None
        await self.redis.zadd(abort_jobs_ss, {arq_id(job): timestamp_ms()})

    @_through_broker
    async def workers(self) -> builtins.list[WorkerInfo]:  # `list` is a method here
        assert self.redis is not None
        keys = [k async for k in self.redis.scan_iter(match=WORKER + "*", count=100)]
        raws = await self.redis.mget(keys) if keys else []
        infos = [WorkerInfo.model_validate_json(r) for r in raws if r]
        return sorted(infos, key=lambda w: (w.queue, w.id))
