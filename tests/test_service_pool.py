"""The build pool on its own: workers that die (idle, as a build is handed over, inside a batch),
builds that wait and are handed over together, builds that must run alone."""

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable

import pytest

from app.api.problems import from_field_error
from app.artifacts import warm
from app.errors import FieldError
from app.service.pool import BuildPool

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not


def _with_pool(scenario: Callable[[BuildPool], Awaitable[None]], *args, **kwargs) -> None:
    """Run `scenario` against a started, warmed pool on a fresh loop; stop the pool after."""

    async def main() -> None:
        pool = BuildPool(*args, **kwargs)
        try:
            await pool.warm()
            await scenario(pool)
        finally:
            pool.shutdown()

    asyncio.run(main())


def _kill(pool: BuildPool) -> None:
    worker = pool._all[0]
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join()


def _pid_and(value: int) -> tuple[int, int]:
    """A build stand-in: which worker ran it, and what it was given."""
    if value < 0:
        raise ValueError(f"negative: {value}")
    return os.getpid(), value


def _slow_pid(value: int) -> tuple[int, int]:
    time.sleep(0.2)
    return os.getpid(), value


def _slow(value: int) -> int:
    time.sleep(0.3)
    return value


def test_a_worker_dying_as_its_build_is_handed_over_is_a_503_and_is_replaced():
    async def scenario(pool: BuildPool) -> None:
        _kill(pool)  # the loop has not seen it yet: the worker still looks idle
        with pytest.raises(FieldError) as refused:
            await pool.run(warm)
        answer = from_field_error(refused.value)  # what the HTTP edge makes of it
        assert answer.status == 503
        assert answer.headers["Retry-After"] == "7"
        assert await pool.run(warm) is True  # on the replacement
        assert pool.pending == 0

    _with_pool(scenario, 1, 0, 7)


def test_a_worker_that_died_idle_is_never_handed_a_build():
    async def scenario(pool: BuildPool) -> None:
        _kill(pool)
        await asyncio.sleep(0.5)  # the loop sees the pipe close and starts a replacement
        results = await asyncio.gather(*(pool.run(warm) for _ in range(4)))
        assert results == [True] * 4

    _with_pool(scenario, 2, 4, 2)


def test_an_exception_in_the_worker_is_raised_in_the_caller():
    async def scenario(pool: BuildPool) -> None:
        with pytest.raises(ZeroDivisionError):
            await pool.run(divmod, 1, 0)
        assert await pool.run(divmod, 7, 2) == (3, 1)  # the worker lives on

    _with_pool(scenario, 1, 0, 2)


def test_waiting_builds_share_a_worker_and_each_gets_its_own_answer():
    async def scenario(pool: BuildPool) -> None:
        values = list(range(-3, 20))
        answers = await asyncio.gather(
            *(pool.run(_pid_and, v) for v in values), return_exceptions=True
        )
        for value, answer in zip(values, answers, strict=True):
            if value < 0:  # a failing build fails alone, not its batch
                assert isinstance(answer, ValueError) and str(value) in str(answer)
            else:
                assert answer[1] == value
        assert len({a[0] for a in answers if isinstance(a, tuple)}) == 1
        assert pool.pending == 0

    _with_pool(scenario, 1, 64, 2, max_batch=4)


def test_the_first_worker_to_free_up_takes_only_its_share_of_the_queue():
    async def scenario(pool: BuildPool) -> None:
        busy = [asyncio.ensure_future(pool.run(_slow_pid, v)) for v in range(2)]
        await asyncio.sleep(0.05)  # both workers busy; these four wait
        waiting = [asyncio.ensure_future(pool.run(_slow_pid, v)) for v in range(4)]
        await asyncio.gather(*busy)
        answers = await asyncio.gather(*waiting)
        assert [v for _, v in answers] == [0, 1, 2, 3]
        assert len({pid for pid, _ in answers}) == 2  # not all four on one worker

    _with_pool(scenario, 2, 64, 2)


def test_every_build_of_a_batch_whose_worker_dies_is_a_503():
    async def scenario(pool: BuildPool) -> None:
        first = asyncio.ensure_future(pool.run(_slow, 0))  # the worker is busy with it ...
        await asyncio.sleep(0.05)
        batch = [asyncio.ensure_future(pool.run(_slow, v)) for v in range(1, 5)]  # ... so
        await first  # these waited, and went to it as one batch when it was done
        await asyncio.sleep(0.3)  # inside that batch (4 × 0.3 s)
        _kill(pool)
        answers = await asyncio.gather(*batch, return_exceptions=True)
        assert all(
            isinstance(a, FieldError) and from_field_error(a).status == 503 for a in answers
        ), answers
        assert await pool.run(_slow, 9) == 9  # the replacement serves

    _with_pool(scenario, 1, 64, 3, max_batch=8)


def test_a_build_that_runs_alone_is_never_batched():
    async def scenario(pool: BuildPool) -> None:
        first = asyncio.ensure_future(pool.run(_slow, 0))  # busy: the next three wait
        await asyncio.sleep(0.05)
        big = asyncio.ensure_future(pool.run(_slow, 1, alone=True))
        small = [asyncio.ensure_future(pool.run(_slow, v)) for v in (2, 3)]
        await first
        await asyncio.sleep(0.15)  # inside `big`, which went to the worker by itself
        _kill(pool)
        with pytest.raises(FieldError):
            await big
        assert await asyncio.gather(*small) == [2, 3]  # not in its batch: they ran after

    _with_pool(scenario, 1, 64, 3, max_batch=8)


def test_a_build_that_cannot_be_sent_fails_in_the_caller_and_the_pool_serves_on():
    async def scenario(pool: BuildPool) -> None:
        with pytest.raises(Exception, match="pickle"):
            await pool.run(_pid_and, lambda: 1)  # a lambda does not pickle
        # The worker it was meant for is free again (else this would wait forever).
        assert (await asyncio.wait_for(pool.run(_pid_and, 5), 10))[1] == 5
        assert pool.pending == 0

    _with_pool(scenario, 1, 4, 2)


class _Positioned(Exception):
    """An exception that pickles but cannot be rebuilt from what it pickles (its __init__
    takes more than it passes up), as some of the compilers' own errors are."""

    def __init__(self, message: str, line: int):
        super().__init__(f"{message} at line {line}")


def _fails_at_line(line: int) -> None:
    raise _Positioned("no such op", line)


def test_an_exception_that_cannot_be_rebuilt_fails_in_the_caller_naming_it():
    async def scenario(pool: BuildPool) -> None:
        with pytest.raises(RuntimeError, match="_Positioned: no such op at line 3"):
            await asyncio.wait_for(pool.run(_fails_at_line, 3), 10)
        assert (await asyncio.wait_for(pool.run(_pid_and, 5), 10))[1] == 5  # it serves on
        assert pool.pending == 0

    _with_pool(scenario, 1, 4, 2)
