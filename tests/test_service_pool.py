"""The build pool on its own: workers that die, idle or at the moment a build is handed over."""

import asyncio
import os
import signal

import pytest

from app.service.pool import BuildPool
from app.service.problems import Problem
from app.service.worker import warm


def _kill(pool: BuildPool) -> None:
    worker = pool._all[0]
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join()


def test_a_worker_dying_as_its_build_is_handed_over_is_a_503_and_is_replaced():
    async def scenario():
        pool = BuildPool(1, 0, 7)
        try:
            await pool.warm()
            _kill(pool)  # the loop has not seen it yet: the worker still looks idle
            with pytest.raises(Problem) as refused:
                await pool.run(warm)
            assert refused.value.status == 503
            assert refused.value.headers["Retry-After"] == "7"
            assert await pool.run(warm) is True  # on the replacement
            assert pool.pending == 0
        finally:
            pool.shutdown()

    asyncio.run(scenario())


def test_a_worker_that_died_idle_is_never_handed_a_build():
    async def scenario():
        pool = BuildPool(2, 4, 2)
        try:
            await pool.warm()
            _kill(pool)
            await asyncio.sleep(0.5)  # the loop sees the pipe close and starts a replacement
            results = await asyncio.gather(*(pool.run(warm) for _ in range(4)))
            assert results == [True] * 4
        finally:
            pool.shutdown()

    asyncio.run(scenario())


def test_an_exception_in_the_worker_is_raised_in_the_caller():
    async def scenario():
        pool = BuildPool(1, 0, 2)
        try:
            with pytest.raises(ZeroDivisionError):
                await pool.run(divmod, 1, 0)
            assert await pool.run(divmod, 7, 2) == (3, 1)  # the worker lives on
        finally:
            pool.shutdown()

    asyncio.run(scenario())
