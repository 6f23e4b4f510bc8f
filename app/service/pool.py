"""The bounded pool of worker processes that build kernels.

Processes, not threads: building a program is pure Python, and a build thread holding the GIL
made the event loop wait up to a switch interval (5 ms) at every step, which cut the request rate
of everything else several-fold. Weights cross the boundary cheaply: uploads as file references
the worker maps, inline weights (at most the JSON limit) pickled.

Each worker is a spawned process with one pipe, driven from the event loop itself (the pipe is
watched with `add_reader`): no executor threads, so a build costs the loop one pickled message
each way and no GIL hand-offs. A worker that dies is replaced; the build it was running fails
with 503 + Retry-After. A worker exits when its pipe closes, so it never outlives the server.

When every worker is busy and `backlog` builds are already waiting, a new build is refused with
503 + Retry-After rather than queued without bound.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from app.service import messages
from app.service.problems import Problem
from app.service.worker import warm

T = TypeVar("T")
log = logging.getLogger("ane.service")
_SPAWN = multiprocessing.get_context("spawn")  # the server has threads: forking it is unsafe


class WorkerLost(Exception):
    """The process died before answering."""


class _Raised:
    """An exception from the worker, with its traceback as text (tracebacks do not pickle)."""

    def __init__(self, exc: BaseException):
        self.exc = exc
        self.trace = "".join(traceback.format_exception(exc))


def _serve(conn: Connection) -> None:
    """A worker's life: run each (fn, args) received, send back its result; exit at EOF."""
    while True:
        try:
            fn, args = messages.receive(conn.fileno())
        except (EOFError, OSError):
            return
        try:
            result: Any = fn(*args)
        except BaseException as exc:  # the caller re-raises it
            result = _Raised(exc)
        try:
            messages.send(conn.fileno(), result)
        except OSError:  # the server is gone
            return
        except Exception as exc:  # the result (or the exception raised) does not pickle
            error = RuntimeError(f"{fn.__name__} returned what cannot be sent: {exc}")
            messages.send(conn.fileno(), _Raised(error))


class _Worker:
    def __init__(self, on_exit: Callable[[_Worker], None]):
        self.conn, child = _SPAWN.Pipe()
        self.process = _SPAWN.Process(target=_serve, args=(child,), name="ane-build", daemon=True)
        self.process.start()
        child.close()
        self._answer: asyncio.Future | None = None
        self._on_exit = on_exit
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable)

    def call(self, fn: Callable[..., Any], args: tuple) -> asyncio.Future:
        answer = self._answer = self._loop.create_future()
        try:
            messages.send(self.conn.fileno(), (fn, args))
        except OSError:  # it died just now: the answer is WorkerLost
            self._gone()
        return answer

    def _readable(self) -> None:
        try:
            result = messages.receive(self.conn.fileno())
        except (EOFError, OSError):  # an idle worker can die too: readable means EOF then
            self._gone()
            return
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_result(result)

    def _gone(self) -> None:
        self.close()
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(WorkerLost())
        self._on_exit(self)

    def close(self) -> None:
        if self.conn.closed:
            return
        self._loop.remove_reader(self.conn.fileno())
        self.conn.close()  # the worker sees EOF and exits


class BuildPool:
    def __init__(self, workers: int, backlog: int, retry_after: int, on_change=None):
        self.workers, self.backlog, self.retry_after = workers, backlog, retry_after
        self._pending = 0  # running + waiting; only touched on the event loop thread
        self._on_change = on_change or (lambda n: None)
        self._all: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] | None = None  # created on the loop, at first use

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def capacity(self) -> int:
        return self.workers + self.backlog

    def _started(self) -> asyncio.Queue[_Worker]:
        if self._idle is None:
            self._idle = asyncio.Queue()
            for _ in range(self.workers):
                self._add_worker()
        return self._idle

    def _add_worker(self) -> None:
        worker = _Worker(self._replace)
        self._all.append(worker)
        assert self._idle is not None
        self._idle.put_nowait(worker)

    def _replace(self, dead: _Worker) -> None:
        if dead not in self._all:  # shutting down
            return
        log.error("a build worker died; starting another")
        self._all.remove(dead)
        self._add_worker()

    def _release(self, worker: _Worker, answer: asyncio.Future) -> None:
        """Back to the idle queue once its answer is in (a dead worker was replaced instead)."""

        def release(_: object) -> None:
            if worker in self._all and self._idle is not None:
                self._idle.put_nowait(worker)

        if answer.done():
            release(answer)
        else:
            answer.add_done_callback(release)

    async def _idle_worker(self) -> _Worker:
        idle = self._started()
        while True:
            worker = await idle.get()
            if worker in self._all:  # not one that died while it waited (it was replaced)
                return worker

    async def warm(self) -> None:
        """Start every worker now and pay its one-time costs, so the first builds do not."""
        workers = [await self._idle_worker() for _ in range(self.workers)]
        answers = [worker.call(warm, ()) for worker in workers]
        for worker, answer in zip(workers, answers, strict=True):
            self._release(worker, answer)
        await asyncio.gather(*answers, return_exceptions=True)

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
            worker = await self._idle_worker()
            answer = worker.call(fn, args)
            try:
                # Shielded: a cancelled request leaves the build to finish, and only then is
                # the worker free for the next one.
                result = await asyncio.shield(answer)
            finally:
                self._release(worker, answer)
        except WorkerLost:
            raise Problem(
                503,
                "the build worker died during this build; retry it",
                title="Build worker lost",
                headers={"Retry-After": str(self.retry_after)},
            ) from None
        finally:
            self._pending -= 1
            self._on_change(self._pending)
        if isinstance(result, _Raised):
            log.error("a build raised in its worker:\n%s", result.trace)
            raise result.exc
        return result

    def shutdown(self) -> None:
        """Stop the workers. uvicorn has drained the requests by the time this runs; closing a
        worker's pipe makes it exit once its current build (if any) is done."""
        workers, self._all = self._all, []
        for worker in workers:
            worker.close()
        for worker in workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.terminate()
