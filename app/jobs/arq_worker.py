"""arq's Worker as a farm needs it: a short, renewed lease on running jobs, and no exit when the
broker goes away.

arq's own loop ends the process at the first Redis error (its poll, its heartbeat, finishing a
job). Here every place the loop touches Redis waits out an outage on the worker's `BrokerLink`
instead: the poll loop stops polling, jobs already running keep running (their own writes wait
on the same link), finishing a job waits until it can be recorded, and polling resumes when the
broker answers. At start-up the worker waits for the broker the same way. Only a signal
(SIGTERM, SIGINT) stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.worker import Worker

from app.core.files import remove_in_flight
from app.jobs.broker import is_broker_fault
from app.jobs.outage import BrokerLink

log = logging.getLogger("ane.worker")


class FarmWorker(Worker):
    def __init__(self, *args: Any, lease_s: float, link: BrokerLink, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # arq sets the in-progress key to the job timeout + 10 s, which would leave a dead
        # worker's job stuck for as long: here it is a lease the job renews (farm_worker.py).
        self.in_progress_timeout_s = lease_s
        self.link = link
        self.ctx["broker"] = link
        link.on_back.append(self._reclaim_leases)

    async def main(self) -> None:
        while True:
            try:
                await self.link.call(self.pool.ping)  # at start-up too: wait for the broker
                await super().main()  # returns only in burst mode
                return
            except Exception as exc:
                if not is_broker_fault(exc):
                    raise
                if self.link.stopping:
                    # the signal cancelled a broker call and redis-py reported that as a lost
                    # connection: the stop is what happened, and it is a clean one
                    return
                await self.link.ride_out(exc)

    async def _reclaim_leases(self) -> None:
        """Set the leases of the jobs running here again, before polling resumes: a broker
        restarted from its append-only file has dropped those that lapsed during the outage,
        and this worker would otherwise pick its own running jobs up a second time."""
        px = int(self.in_progress_timeout_s * 1000)
        for job_id in list(self.job_tasks):
            await self.pool.set(in_progress_key_prefix + job_id, b"1", px=px)

    async def _poll_iteration(self) -> None:
        if self.link.stopping:
            # arq ends its poll loop by cancelling it, and a cancellation can be lost inside a
            # broker call (seen: a worker polling on for a minute after SIGTERM, taking back
            # the job the signal had just handed back until the job gave up); so it ends here too.
            raise asyncio.CancelledError
        try:
            await super()._poll_iteration()
        except Exception as exc:
            if not is_broker_fault(exc):
                raise
            await self.link.ride_out(exc)

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        try:
            await super().start_jobs(job_ids)
        except Exception as exc:
            if is_broker_fault(exc):
                # arq counts the job it is starting (and takes a slot of its semaphore) before
                # the Redis calls that claim it; one that failed would keep them for good and
                # the worker would take fewer jobs after every outage.
                self.job_counter -= 1
                self.sem.release()
            raise

    async def finish_job(self, *args: Any, **kwargs: Any) -> None:
        await self.link.call(super().finish_job, *args, **kwargs)

    async def finish_failed_job(self, *args: Any, **kwargs: Any) -> None:
        await self.link.call(super().finish_failed_job, *args, **kwargs)

    def handle_sig(self, signum: signal.Signals) -> None:
        self.link.stop()  # calls waiting for the broker give up, so the worker can exit
        self.allow_pick_jobs = False  # the jobs handed back are for another worker
        super().handle_sig(signum)
        # The jobs go back to the queue; their builds, in threads that cannot be cancelled,
        # would finish zips nobody publishes: their temp files go now, and none is started.
        remove_in_flight()

    async def close(self) -> None:
        try:
            await super().close()
        except Exception as exc:
            if not is_broker_fault(exc):
                raise
            # Stopping while the broker is away: the heartbeat expires on its own.
            log.warning("stopped without the broker", extra={"error": str(exc)})
            if self.on_shutdown is not None:
                await self.on_shutdown(self.ctx)
            if self._pool is not None:
                with contextlib.suppress(Exception):
                    await self._pool.aclose()
                self._pool = None
