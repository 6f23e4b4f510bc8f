"""A pad's parts as the passes read them: its mode, its constant and its (before, after) pair for
every axis of its input."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.mil.ir import Operation
from app.passes.patterns import scalar, stored


@dataclass(frozen=True)
class Pad:
    mode: str
    value: float | None  # the constant of a constant pad (None: not one number)
    pairs: tuple[tuple[int, int], ...]  # per axis of the input, first axis first


def pad_of(op: Operation) -> Pad | None:
    """The pad's parts, when its pad amounts are a const (they always are here)."""
    amounts = stored(op.var("pad"))
    if amounts is None or isinstance(amounts, str):
        return None
    flat = [int(v) for v in np.asarray(amounts).reshape(-1)]
    rank = op.var("x").tensor.rank
    given = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)]
    pairs = tuple([(0, 0)] * (rank - len(given)) + given)
    mode = str(stored(op.var("mode"))) if "mode" in op.inputs else "constant"
    value = scalar(op.var("constant_val")) if "constant_val" in op.inputs else 0.0
    return Pad(mode, value, pairs)


def padded_axes(pairs: tuple[tuple[int, int], ...]) -> set[int]:
    return {i for i, (b, a) in enumerate(pairs) if b or a}


def amounts(pairs: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Pad amounts for pad's `pad`: the pairs from the first padded axis on."""
    axes = padded_axes(pairs)
    first = min(axes) if axes else len(pairs) - 1
    return np.array([v for pair in pairs[first:] for v in pair], np.int32)
