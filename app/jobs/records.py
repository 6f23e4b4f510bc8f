"""Where job records live: a dict in the embedded engine, Redis for a farm.

Every change is a read-modify-write of one record, atomic per job (a lock in memory, WATCH/MULTI
in Redis), so a cancel and a worker's progress cannot overwrite each other. Finished records
expire after `keep_s`; the Redis index of job ids is pruned as records expire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import WatchError

from app.jobs.lifecycle import Batch, Job, JobState

PREFIX = "ane:"
JOB = PREFIX + "job:"
BATCH = PREFIX + "batch:"
INDEX = PREFIX + "jobs"  # sorted set: job id by creation time

Change = Callable[[Job], Job | None]  # returns the new record, or None to leave it alone


class Records(Protocol):
    async def get(self, job_id: str) -> Job | None: ...

    async def claim(self, job: Job, replace: Callable[[Job], bool]) -> tuple[Job, bool]:
        """Store `job` unless a record exists that `replace` does not allow replacing.
        Returns (the record now stored, whether it is `job`)."""
        ...

    async def update(self, job_id: str, change: Change) -> Job | None: ...

    async def list(self, limit: int, state: JobState | None = None) -> list[Job]: ...

    async def put_batch(self, batch: Batch) -> None: ...

    async def get_batch(self, batch_id: str) -> Batch | None: ...


class MemoryRecords:
    def __init__(self, keep_s: float):
        self.keep_s = keep_s
        self._jobs: dict[str, Job] = {}
        self._batches: dict[str, Batch] = {}
        self._lock = asyncio.Lock()

    def _expired(self, job: Job) -> bool:
        return job.done and job.updated_at + self.keep_s < time.time()

    def _purge(self) -> None:
        for job_id in [k for k, j in self._jobs.items() if self._expired(j)]:
            del self._jobs[job_id]

    async def get(self, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        return None if job is None or self._expired(job) else job

    async def claim(self, job: Job, replace: Callable[[Job], bool]) -> tuple[Job, bool]:
        async with self._lock:
            self._purge()
            old = self._jobs.get(job.id)
            if old is not None and not replace(old):
                return old, False
            if old is not None:
                job = job.model_copy(update={"run": old.run + 1})
            self._jobs[job.id] = job
            return job, True

    async def update(self, job_id: str, change: Change) -> Job | None:
        async with self._lock:
            old = await self.get(job_id)
            new = change(old) if old is not None else None
            if new is not None:
                self._jobs[job_id] = new
            return new

    async def list(self, limit: int, state: JobState | None = None) -> list[Job]:
        self._purge()
        jobs = sorted(self._jobs.values(), key=lambda j: j.created_at, reverse=True)
        return [j for j in jobs if state is None or j.state == state][:limit]

    async def put_batch(self, batch: Batch) -> None:
        self._batches[batch.id] = batch

    async def get_batch(self, batch_id: str) -> Batch | None:
        return self._batches.get(batch_id)


class RedisRecords:
    """Records as JSON strings at `ane:job:<id>`; finished ones get a TTL of `keep_s`."""

    def __init__(self, redis: Redis, keep_s: int):
        self.redis, self.keep_s = redis, keep_s

    async def get(self, job_id: str) -> Job | None:
        raw = await self.redis.get(JOB + job_id)
        return Job.model_validate_json(raw) if raw else None

    def _write(self, pipe, job: Job) -> None:
        if job.done:
            pipe.set(JOB + job.id, job.model_dump_json(), ex=self.keep_s)
        else:
            pipe.set(JOB + job.id, job.model_dump_json())
        pipe.zadd(INDEX, {job.id: job.created_at})

    async def claim(self, job: Job, replace: Callable[[Job], bool]) -> tuple[Job, bool]:
        key = JOB + job.id
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    old = Job.model_validate_json(raw) if raw else None
                    if old is not None and not replace(old):
                        await pipe.reset()
                        return old, False
                    new = job.model_copy(update={"run": old.run + 1}) if old else job
                    pipe.multi()
                    self._write(pipe, new)
                    await pipe.execute()
                    return new, True
                except WatchError:
                    continue  # someone else wrote it between our read and write: look again

    async def update(self, job_id: str, change: Change) -> Job | None:
        key = JOB + job_id
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    new = change(Job.model_validate_json(raw)) if raw else None
                    if new is None:
                        await pipe.reset()
                        return None
                    pipe.multi()
                    self._write(pipe, new)
                    await pipe.execute()
                    return new
                except WatchError:
                    continue

    async def list(self, limit: int, state: JobState | None = None) -> list[Job]:
        out: list[Job] = []
        start, page = 0, max(limit, 50)
        while len(out) < limit:
            ids = await self.redis.zrevrange(INDEX, start, start + page - 1)
            if not ids:
                break
            raws = await self.redis.mget([JOB + i.decode() for i in ids])
            gone = [i for i, raw in zip(ids, raws, strict=True) if raw is None]
            if gone:
                await self.redis.zrem(INDEX, *gone)  # their records expired
                start -= len(gone)
            for raw in raws:
                if raw is not None:
                    job = Job.model_validate_json(raw)
                    if state is None or job.state == state:
                        out.append(job)
            start += page
        return out[:limit]

    async def put_batch(self, batch: Batch) -> None:
        await self.redis.set(BATCH + batch.id, batch.model_dump_json(), ex=self.keep_s)

    async def get_batch(self, batch_id: str) -> Batch | None:
        raw = await self.redis.get(BATCH + batch_id)
        return Batch.model_validate_json(raw) if raw else None
