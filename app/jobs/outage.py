"""A worker's link to its broker through outages.

Whoever meets the outage first (the poll loop, a job writing its record, arq finishing a job)
marks the broker down and starts one reconnect loop: capped exponential backoff with jitter,
a PING per attempt. Everyone else who needs the broker waits on the same loop; running jobs
carry on with what needs no broker (a compile, a publish into the artifact cache) and wait only
when they must write. When the broker answers again every waiter goes on. The outages are
logged as they start and end, and kept for the worker's heartbeat (`status`).

Only a stopping worker (SIGTERM, SIGINT) stops waiting: its calls then fail at once, so it can
exit; a worker never exits because of an outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis

from app.jobs.broker import Backoff, is_broker_fault
from app.jobs.lifecycle import Batch, Job, JobState
from app.jobs.records import Change, Records

T = TypeVar("T")
log = logging.getLogger("ane.worker")


class BrokerLink:
    def __init__(self, redis: Redis, where: str, first_delay: float, max_delay: float):
        self.redis, self.where = redis, where
        self.backoff = Backoff(first_delay, max_delay)
        self._up = asyncio.Event()
        self._up.set()
        self.stopping = False
        self._reconnecting: asyncio.Task | None = None
        self.outages = 0
        self.down_since: float | None = None
        self.last_error: str | None = None
        self.attempts = 0  # reconnect attempts in the current outage
        self.last_outage: dict[str, Any] | None = None
        # Run once the broker answers again, before anyone waiting on it goes on.
        self.on_back: list[Callable[[], Awaitable[None]]] = []

    @property
    def reachable(self) -> bool:
        return self._up.is_set() and self.down_since is None

    def status(self) -> dict[str, Any]:
        """What the heartbeat reports: up or down, since when, the outages seen and the last."""
        return {
            "reachable": self.reachable,
            "down_since": self.down_since,
            "last_error": self.last_error,
            "outages": self.outages,
            "last_outage": self.last_outage,
        }

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` against the broker, waiting out any outage it meets."""
        while True:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                if self.stopping or not is_broker_fault(exc):
                    raise
                await self.ride_out(exc)

    async def ride_out(self, exc: BaseException) -> None:
        """Return once the broker answers again (at once if it does now: a dead pooled
        connection after a broker restart is not an outage). Raises `exc` when stopping.

        A stopping worker raises at once, whether the broker answers or not: redis-py turns the
        cancellation of a call in flight (arq's SIGTERM cancels the poll loop) into a
        ConnectionError, and answering that with a successful ping would poll on, picking up
        the jobs the signal just handed back."""
        if self.stopping:
            raise exc
        if self.down_since is None:
            if await self._answers():
                return
            if self.down_since is None:  # the first to notice (the others saw it during the ping)
                self._went_down(exc)
        await self._up.wait()
        if self.stopping:
            raise exc

    def stop(self) -> None:
        """The worker is stopping: wake every waiter, whose calls now fail at once."""
        self.stopping = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        self._up.set()

    async def _answers(self) -> bool:
        try:
            await self.redis.ping()
            return True
        except Exception as exc:
            if not is_broker_fault(exc):
                raise
            self.last_error = str(exc)
            return False

    def _went_down(self, exc: BaseException) -> None:
        self._up.clear()
        self.outages += 1
        self.down_since, self.last_error, self.attempts = time.time(), str(exc), 0
        log.warning(
            "broker unreachable; reconnecting with backoff",
            extra={"broker": self.where, "error": str(exc), "outage": self.outages},
        )
        self._reconnecting = asyncio.create_task(self._reconnect(), name="ane-broker-reconnect")

    async def _reconnect(self) -> None:
        while not await self._attempt():
            if self.stopping:
                return
        ended = time.time()
        started = self.down_since or ended
        self.last_outage = {
            "started_at": started,
            "ended_at": ended,
            "seconds": round(ended - started, 3),
            "error": self.last_error,
            "reconnect_attempts": self.attempts,
        }
        self.down_since = None
        self.backoff.reset()
        for hook in self.on_back:
            try:
                await hook()
            except Exception:  # a hook that fails must not keep the waiters waiting
                log.exception("after the broker came back")
        log.warning(
            "broker reachable again",
            extra={
                "broker": self.where,
                "outage_s": self.last_outage["seconds"],
                "reconnect_attempts": self.attempts,
            },
        )
        self._up.set()

    async def _attempt(self) -> bool:
        """One reconnect attempt after the next backoff delay: whether the broker answered."""
        delay = self.backoff.next()
        await asyncio.sleep(delay)
        self.attempts += 1
        try:
            if await self._answers():
                return True
        except Exception as exc:  # not an outage error, but no answer either: keep trying
            self.last_error = f"{type(exc).__name__}: {exc}"
        log.info(
            "broker still unreachable",
            extra={"broker": self.where, "attempt": self.attempts, "waited_s": round(delay, 3)},
        )
        return False


class PatientRecords:
    """Job records that wait out broker outages (a worker's: its jobs cannot report without
    them, and report as soon as the broker is back).

    An update is shielded: should arq's backstop timeout cancel the job while its result waits
    for a long outage, the result is still recorded when the broker returns (else the record
    would say `compiling` for ever)."""

    def __init__(self, records: Records, link: BrokerLink):
        self.records, self.link = records, link

    async def get(self, job_id: str) -> Job | None:
        return await self.link.call(self.records.get, job_id)

    async def claim(self, job: Job, replace: Callable[[Job], bool]) -> tuple[Job, bool]:
        return await self.link.call(self.records.claim, job, replace)

    async def update(self, job_id: str, change: Change) -> Job | None:
        write = asyncio.ensure_future(self.link.call(self.records.update, job_id, change))
        write.add_done_callback(_retrieved)
        return await asyncio.shield(write)

    async def list(self, limit: int, state: JobState | None = None) -> list[Job]:
        return await self.link.call(self.records.list, limit, state)

    async def put_batch(self, batch: Batch) -> None:
        await self.link.call(self.records.put_batch, batch)

    async def get_batch(self, batch_id: str) -> Batch | None:
        return await self.link.call(self.records.get_batch, batch_id)


def _retrieved(task: asyncio.Future) -> None:
    """A shielded write whose waiter was cancelled still ends; its error (a worker stopping in
    an outage) is logged here rather than as an exception nobody retrieved."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("a job record write failed", extra={"error": str(task.exception())})
