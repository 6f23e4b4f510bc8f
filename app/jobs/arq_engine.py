"""The farm engine: job records in Redis, jobs queued on arq, run by `ane-kernels worker`.

    API: record (ane:job:<key>) -> arq enqueue(_job_id=<key>, _queue_name=ane-macos|ane-linux)
    worker: arq picks it up -> app.jobs.worker.ane_job -> pipeline.run_job

arq's `_job_id` is the job key (suffixed `-r<run>` when a failed job is submitted again), so
identical submissions in flight are one arq job even across API instances. Everything lives in
Redis: a new API process (or a restarted one) sees the same jobs.
"""

from __future__ import annotations

import json
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import abort_jobs_ss
from arq.utils import timestamp_ms

from app.jobs.artifacts import SharedArtifacts
from app.jobs.config import JobSettings
from app.jobs.engine import JobEngine
from app.jobs.model import Job, WorkerInfo
from app.jobs.records import PREFIX, RedisRecords

FUNCTION = "ane_job"
WORKER = PREFIX + "worker:"  # heartbeat keys: ane:worker:<id>, with a TTL


def serialize(data: dict[str, Any]) -> bytes:
    # JSON, not arq's default pickle: a worker must not execute whatever Redis hands it.
    return json.dumps(data, default=str).encode()


def deserialize(raw: bytes) -> dict[str, Any]:
    return json.loads(raw)


def arq_id(job: Job) -> str:
    return job.id if job.run == 0 else f"{job.id}-r{job.run}"


def redis_settings(url: str) -> RedisSettings:
    return RedisSettings.from_dsn(url)


async def connect(url: str) -> ArqRedis:
    return await create_pool(
        redis_settings(url), job_serializer=serialize, job_deserializer=deserialize
    )


class ArqEngine(JobEngine):
    name = "arq"

    def __init__(
        self, settings: JobSettings, artifacts: SharedArtifacts, redis: ArqRedis | None = None
    ):
        super().__init__(settings, artifacts)
        if redis is None and not settings.redis_url:
            raise ValueError("ArqEngine needs ANE_REDIS_URL (or a connection)")
        self.redis = redis
        self._own_connection = redis is None

    async def start(self) -> None:
        if self.redis is None:
            assert self.settings.redis_url
            self.redis = await connect(self.settings.redis_url)
        self.records = RedisRecords(self.redis, self.settings.job_keep_s)

    async def close(self) -> None:
        if self.redis is not None and self._own_connection:
            await self.redis.aclose()
            self.redis = None

    async def _dispatch(self, job: Job) -> None:
        assert self.redis is not None
        await self.redis.enqueue_job(
            FUNCTION, job.id, job.run, _job_id=arq_id(job), _queue_name=job.queue
        )

    async def _redispatch(self, job: Job) -> None:
        # A no-op while arq holds the job (queued, running or its result kept); it re-queues a
        # job whose enqueue was lost (an API that died between storing the record and queueing).
        await self._dispatch(job)

    async def _stop(self, job: Job) -> None:
        # arq's own abort: a running job's task is cancelled (its compiler process killed), a
        # queued one is dropped when a worker reaches it. Workers run with allow_abort_jobs.
        assert self.redis is not None
        await self.redis.zadd(abort_jobs_ss, {arq_id(job): timestamp_ms()})

    async def workers(self) -> list[WorkerInfo]:
        assert self.redis is not None
        keys = [k async for k in self.redis.scan_iter(match=WORKER + "*", count=100)]
        raws = await self.redis.mget(keys) if keys else []
        infos = [WorkerInfo.model_validate_json(r) for r in raws if r]
        return sorted(infos, key=lambda w: (w.queue, w.id))
