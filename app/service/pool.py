"""The bounded worker pool that builds kernels off the event loop.

Threads, not processes: a build maps uploaded weights from disk and hands arrays to the packager,
which would all have to be pickled across a process boundary; the heavy parts (hashing, dtype
conversion, file writes, CRCs) release the GIL. When every worker is busy and `backlog` builds are
already waiting, a new build is refused with 503 + Retry-After rather than queued without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from app.service.problems import Problem

T = TypeVar("T")


class BuildPool:
    def __init__(self, workers: int, backlog: int, retry_after: int, on_change=None):
        self.workers, self.backlog, self.retry_after = workers, backlog, retry_after
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="ane-build")
        self._pending = 0  # running + waiting; only touched on the event loop thread
        self._on_change = on_change or (lambda n: None)

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def capacity(self) -> int:
        return self.workers + self.backlog

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
        finally:
            self._pending -= 1
            self._on_change(self._pending)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
