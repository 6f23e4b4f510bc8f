"""Where the CPU-bound steps of a build run: a `RunBuild` is handed each step as a top-level
function and its (picklable) arguments.

The API process passes its build pool's `run` (app/service/pool.py): there a build never runs
on the event loop's threads, where a step holding the GIL would stall every request. The farm
worker and the CLI serve nothing else while they build, so `in_thread` is enough for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# Builds with more weight bytes than this take a pool worker to themselves (see BuildPool): they
# run long enough that waiting behind another in a batch would be felt, and a wake-up is nothing
# next to them.
ALONE_WEIGHT_BYTES = 4 << 20


class RunBuild(Protocol):
    def __call__(
        self, fn: Callable[..., T], /, *args: Any, alone: bool = False
    ) -> Awaitable[T]: ...


async def in_thread(fn: Callable[..., T], /, *args: Any, alone: bool = False) -> T:
    """A step in a thread of this process (`alone` means nothing here: no batches)."""
    return await asyncio.to_thread(fn, *args)


def runs_alone(weight_bytes: int) -> bool:
    return weight_bytes > ALONE_WEIGHT_BYTES
