"""Single-flight: concurrent callers with the same key share one in-flight computation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._inflight: dict[str, asyncio.Future[T]] = {}

    def __len__(self) -> int:
        return len(self._inflight)

    async def do(self, key: str, fn: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Run `fn` once per key at a time; returns (result, True if this caller ran it).

        The leader's work runs in its own task, so a client that disconnects (cancelling its
        handler) does not cancel the build the others are waiting for.
        """
        future = self._inflight.get(key)
        if future is not None:
            return await asyncio.shield(future), False
        task = asyncio.ensure_future(fn())
        self._inflight[key] = task
        task.add_done_callback(lambda _: self._inflight.pop(key, None))
        return await asyncio.shield(task), True
