"""The bounded pool of worker processes that build kernels.

Processes, not threads: building a program is pure Python, and a build thread holding the GIL
made the event loop wait up to a switch interval (5 ms) at every step, which cut the request rate
of everything else several-fold. Weights cross the boundary cheaply: uploads as file references
the worker maps, inline weights (at most the JSON limit) pickled.

When every worker is busy and `backlog` builds are already waiting, a new build is refused with
503 + Retry-After rather than queued without bound.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from app.service.problems import Problem
from app.service.worker import warm, watch_parent

T = TypeVar("T")
log = logging.getLogger("ane.service")


class BuildPool:
    def __init__(self, workers: int, backlog: int, retry_after: int, on_change=None):
        self.workers, self.backlog, self.retry_after = workers, backlog, retry_after
        self._pending = 0  # running + waiting; only touched on the event loop thread
        self._on_change = on_change or (lambda n: None)
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        # spawn: the server process has threads, and forking a threaded process is unsafe.
        return ProcessPoolExecutor(
            self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=watch_parent,
            initargs=(os.getpid(),),
        )

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def capacity(self) -> int:
        return self.workers + self.backlog

    async def warm(self) -> None:
        """Start every worker now, so the first builds do not pay for process start-up."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(self._executor, warm) for _ in range(self.workers))
        )

    async def run(self, fn: Callable[..., T], *args) -> T:
        if self._pending >= self.capacity:
            raise Problem(
                503,
                f"all {self.workers} build workers are busy and {self.backlog} builds are "
                f"waiting; retry in {self.retry_after} s",
                title="Build backlog full",
                headers={"Retry-After": str(self.retry_after)},
            )
        self._pending += 1
        self._on_change(self._pending)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except BrokenProcessPool:
            log.error("a build worker died; starting a new pool")
            self._executor = self._new_executor()
            raise Problem(
                503,
                "the build worker died during this build; retry it",
                title="Build worker lost",
                headers={"Retry-After": str(self.retry_after)},
            ) from None
        finally:
            self._pending -= 1
            self._on_change(self._pending)

    def shutdown(self) -> None:
        """Stop the workers. uvicorn has drained the requests by the time this runs, so no
        build is waiting on them; waiting here is what lets the processes exit with us."""
        self._executor.shutdown(wait=True, cancel_futures=True)
