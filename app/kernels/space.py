"""A catalog op's sample space: the params its tests and its error sweep draw.

An op module writes `param_space(draw) -> params` against `Draw`, once. The loader test draws
through Hypothesis (small axes, shrinking to a small failing case: tests/kernel_cases.py); the
error sweeps (app/reference/sweep.py, sweep_blocks.py) through `RandomDraw`, a seeded NumPy
generator at full size, the evidence behind each op's `tolerance`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

T = TypeVar("T")
FULL = 1023  # the widest axis a sweep draws


class Draw(Protocol):
    def integer(self, low: int, high: int) -> int:
        """Any integer in [low, high]."""
        ...

    def dim(self, high: int = FULL, low: int = 1) -> int:
        """An axis size in [low, high] (channels, features, positions): tests draw small ones."""
        ...

    def dim_choice(self, options: Sequence[int]) -> int:
        """An axis size from `options` (tests keep to the small ones)."""
        ...

    def choice(self, options: Sequence[T]) -> T: ...

    def cycle(self, options: Sequence[T]) -> T:
        """One of `options`, in turn from one draw to the next where draws are numbered (a sweep
        reaches every one evenly), freely chosen elsewhere."""
        ...

    def boolean(self) -> bool: ...

    def log_uniform(self, low: float, high: float) -> float:
        """A positive number spread evenly over the decades from `low` to `high`."""
        ...


ParamSpace = Callable[[Draw], dict[str, Any]]


class RandomDraw:
    """Draws from a NumPy generator; `index` numbers the draw (for `cycle`)."""

    def __init__(self, rng: np.random.Generator, index: int = 0):
        self.rng, self.index = rng, index

    def integer(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def dim(self, high: int = FULL, low: int = 1) -> int:
        return self.integer(low, high)

    def dim_choice(self, options: Sequence[int]) -> int:
        return self.choice(options)

    def choice(self, options: Sequence[T]) -> T:
        return options[int(self.rng.choice(len(options)))]

    def cycle(self, options: Sequence[T]) -> T:
        return options[self.index % len(options)]

    def boolean(self) -> bool:
        return bool(self.rng.integers(2))

    def log_uniform(self, low: float, high: float) -> float:
        return float(10 ** self.rng.uniform(math.log10(low), math.log10(high)))
