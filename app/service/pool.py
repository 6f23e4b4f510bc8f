"""The bounded pool of worker processes that build kernels: every build of the API process, the
synchronous ones and those of the embedded job engine with their compiles (its `run` is the
process's `RunBuild`, app/compile/runner.py).

Processes, not threads: building a program is pure Python, and a build thread holding the GIL
made the event loop wait up to a switch interval (5 ms) at every step, which cut the request rate
of everything else several-fold. Weights cross the boundary cheaply: uploads as file references
the worker maps, inline weights (at most the JSON limit) pickled.

Each worker is a spawned process with one pipe, driven from the event loop itself (the pipe is
watched with `add_reader`): no executor threads and no GIL hand-offs. A worker that dies is
replaced; the builds it was running fail with 503 + Retry-After. A worker exits when its pipe
closes, so it never outlives the server; a stop signal of its own (SIGTERM or SIGINT to the
process group) ends it at once, its half-written zip removed first.

Small builds waiting when a worker is free go to it together, up to `max_batch` and no more than
its share of the queue: one message each way for the lot. A small build costs about a
millisecond, and waking a process for each one (and the loop for each answer) cost a fifth of the
request rate under load. A build marked `alone` (a large one) always has a worker to itself, so it
never waits behind another in a batch.

When every worker is busy and `backlog` builds are already waiting, a new build is refused with
503 + Retry-After rather than queued without bound.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import pickle
import select
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from app.artifacts import warm
from app.core.files import remove_in_flight_on_stop
from app.errors import ErrorKind, FieldError, ServiceError
from app.service import messages

T = TypeVar("T")
log = logging.getLogger("ane.service")
_SPAWN = multiprocessing.get_context("spawn")  # the server has threads: forking it is unsafe


class WorkerLost(Exception):
    """The process died before answering."""


class _Raised:
    """An exception from the worker, with its traceback as text (tracebacks do not pickle).
    One that would not unpickle on the server's side (an `__init__` taking other arguments
    than it passes up) goes as a RuntimeError naming it: else its answer could never be read."""

    def __init__(self, exc: BaseException):
        self.trace = "".join(traceback.format_exception(exc))
        try:
            pickle.loads(messages.encode(exc))
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        self.exc = exc


def _serve(conn: Connection) -> None:
    """A worker's life: run each batch of (fn, args) received and send back the results, in
    order, in one message; exit at EOF, or at SIGTERM/SIGINT (the whole process group is
    stopped, say) once the temp files of the build in progress are removed."""
    remove_in_flight_on_stop()
    frozen = False
    while True:
        try:
            batch = messages.receive(conn.fileno())
        except (EOFError, OSError):
            return
        results = [_result(fn, args) for fn, args in batch]
        try:
            messages.send(conn.fileno(), results)
        except OSError:  # the server is gone
            return
        except Exception:  # a result does not pickle: that one fails, not the whole batch
            messages.send(conn.fileno(), [_sendable(r) for r in results])
        del batch, results
        # A built program is a graph with reference cycles, and it holds the weights it was
        # built from: a weight mapped from an upload's spool file keeps that file's disk space
        # (deleted when its request ended) until the cycle is collected, which in an idle
        # worker may be never. What lived through the first batch (imports, the warm-up) is
        # frozen out of the collector's sight, so a collection walks only what the builds made
        # (~0.1 ms after a small build, against ~0.1 s for the whole heap), and a worker with
        # no next batch waiting collects at once; a busy one leaves it to the collector's own
        # schedule, which the freeze makes frequent.
        if not frozen:
            gc.collect()
            gc.freeze()
            frozen = True
        elif not _next_waiting(conn):
            gc.collect()


def _next_waiting(conn: Connection, within: float = 0.005) -> bool:
    """Whether the next batch arrives within `within` seconds (the server answers and sends
    the next one back to back when builds are waiting)."""
    return bool(select.select([conn.fileno()], [], [], within)[0])


def _result(fn: Callable[..., Any], args: tuple) -> Any:
    try:
        return fn(*args)
    except BaseException as exc:  # the caller re-raises it
        return _Raised(exc)


def _sendable(result: Any) -> Any:
    try:
        messages.encode(result)
    except Exception as exc:
        return _Raised(RuntimeError(f"a build returned what cannot be sent: {exc}"))
    return result


@dataclass(frozen=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple
    answer: asyncio.Future
    alone: bool = False


class _Worker:
    def __init__(self, on_answer: Callable[[_Worker], None], on_exit: Callable[[_Worker], None]):
        self.conn, child = _SPAWN.Pipe()
        self.process = _SPAWN.Process(target=_serve, args=(child,), name="ane-build", daemon=True)
        self.process.start()
        child.close()
        self._batch: list[_Call] = []
        self._on_answer, self._on_exit = on_answer, on_exit
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable)

    def call(self, batch: list[_Call]) -> None:
        self._batch = batch
        try:
            messages.send(self.conn.fileno(), [(c.fn, c.args) for c in batch])
        except OSError:  # it died just now: the answers are WorkerLost
            self._gone()
        except Exception as exc:  # the batch does not pickle: nothing was sent, the worker is free
            self._batch = []
            for call in batch:
                call.answer.set_exception(exc)
            self._on_answer(self)

    def _readable(self) -> None:
        try:
            results = messages.receive(self.conn.fileno())
        except (EOFError, OSError):  # an idle worker can die too: readable means EOF then
            self._gone()
            return
        batch, self._batch = self._batch, []
        for call, result in zip(batch, results, strict=True):
            if not call.answer.done():
                call.answer.set_result(result)
        self._on_answer(self)

    def _gone(self) -> None:
        self.close()
        batch, self._batch = self._batch, []
        for call in batch:
            if not call.answer.done():
                call.answer.set_exception(WorkerLost())
        self._on_exit(self)

    def close(self) -> None:
        if self.conn.closed:
            return
        self._loop.remove_reader(self.conn.fileno())
        self.conn.close()  # the worker sees EOF and exits


class BuildPool:
    def __init__(
        self, workers: int, backlog: int, retry_after: int, on_change=None, max_batch: int = 8
    ):
        self.workers, self.backlog, self.retry_after = workers, backlog, retry_after
        self.max_batch = max_batch
        self._pending = 0  # running + waiting; only touched on the event loop thread
        self._on_change = on_change or (lambda n: None)
        self._all: list[_Worker] = []
        self._idle: list[_Worker] = []
        self._queue: deque[_Call] = deque()
        self._started = False

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def capacity(self) -> int:
        return self.workers + self.backlog

    def _start(self) -> None:
        """The workers start at first use: they need the running loop."""
        if not self._started:
            self._started = True
            for _ in range(self.workers):
                self._add_worker()

    def _add_worker(self) -> None:
        worker = _Worker(self._answered, self._replace)
        self._all.append(worker)
        self._idle.append(worker)

    def _replace(self, dead: _Worker) -> None:
        if dead not in self._all:  # shutting down
            return
        log.error("a build worker died; starting another")
        self._all.remove(dead)
        if dead in self._idle:
            self._idle.remove(dead)
        self._add_worker()
        self._dispatch()

    def _answered(self, worker: _Worker) -> None:
        self._idle.append(worker)
        self._dispatch()

    def _dispatch(self) -> None:
        """Give idle workers the waiting builds: each takes its share of the queue (split
        over all workers, so one that frees up soon still finds work), at most `max_batch`,
        and stops at a build that must run alone."""
        queue = self._queue
        while self._idle and queue:
            share = min(-(-len(queue) // self.workers), self.max_batch)
            batch = [queue.popleft()]
            while not batch[0].alone and queue and not queue[0].alone and len(batch) < share:
                batch.append(queue.popleft())
            self._idle.pop().call(batch)

    def _submit(self, fn: Callable[..., Any], args: tuple, alone: bool) -> asyncio.Future:
        self._start()
        answer = asyncio.get_running_loop().create_future()
        self._queue.append(_Call(fn, args, answer, alone))
        self._dispatch()
        return answer

    async def warm(self) -> None:
        """Start every worker now and pay its one-time costs, so the first builds do not
        (one warm-up each: they are alone, so each idle worker takes one)."""
        answers = [self._submit(warm, (), alone=True) for _ in range(self.workers)]
        await asyncio.gather(*answers, return_exceptions=True)

    async def run(self, fn: Callable[..., T], *args, alone: bool = False) -> T:
        """`fn(*args)` in a worker; `alone`: never batched with other builds."""
        if self._pending >= self.capacity:
            raise ServiceError(
                f"all {self.workers} build workers are busy and {self.backlog} builds are "
                f"waiting; retry in {self.retry_after} s",
                kind=ErrorKind.UNAVAILABLE,
                title="Build backlog full",
                retry_after=self.retry_after,
            )
        self._pending += 1
        self._on_change(self._pending)
        try:
            # Shielded: a cancelled request leaves its build to finish with its batch.
            result = await asyncio.shield(self._submit(fn, args, alone))
        except WorkerLost:
            raise ServiceError(
                "the build worker died during this build; retry it",
                kind=ErrorKind.UNAVAILABLE,
                title="Build worker lost",
                retry_after=self.retry_after,
            ) from None
        finally:
            self._pending -= 1
            self._on_change(self._pending)
        if isinstance(result, _Raised):
            if not isinstance(result.exc, FieldError):  # a request's own fault is no news
                log.error("a build raised in its worker:\n%s", result.trace)
            raise result.exc
        return result

    def shutdown(self) -> None:
        """Stop the workers. uvicorn has drained the requests by the time this runs; closing a
        worker's pipe makes it exit once its current build (if any) is done."""
        workers, self._all, self._idle = self._all, [], []
        while self._queue:  # nobody will run these now
            call = self._queue.popleft()
            if not call.answer.done():
                call.answer.set_exception(WorkerLost())
        for worker in workers:
            worker.close()
        for worker in workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.terminate()
