"""Pooling: windowed reductions over the spatial axes of [N, C, *D] (coremltools `pool.py`).

In ceil mode a last window may reach past the padded input; those positions count neither in a
maximum nor in an average's divisor (as PyTorch's ceil mode). Explicit padding counts in the
divisor unless `exclude_padding_from_average`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_T, U, swept
from app.mil.ops.record import (
    BOOL,
    INT,
    STR,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
    output_flops,
)
from app.mil.ops.windows import WindowError, out_sizes, pads, spatial_args, windows
from app.mil.types import TensorType

F = Family.REDUCTION

_POOL_ARGS = {
    "x": Arg("T"),
    "kernel_sizes": Arg(INT, const=True),
    "strides": Arg(INT, optional=True, const=True),
    "pad_type": Arg(STR, const=True),
    "pad": Arg(INT, optional=True, const=True),
    "ceil_mode": Arg(BOOL, optional=True, const=True),
}
_AVG_ARGS = {"exclude_padding_from_average": Arg(BOOL, optional=True, const=True), **_POOL_ARGS}


def _geometry(
    shape: Sequence[int], get
) -> tuple[list[int], list[int], list[tuple[int, int]], list[int]]:
    """(kernel, strides, (before, after) pads, output sizes) of a pool over `shape`; `get`
    reads an argument (the call's or the executor's)."""
    if not 3 <= len(shape) <= 5:
        raise WindowError("x", f"needs rank 3 to 5 ([N, C, *D]), got rank {len(shape)}")
    kernel = list(get("kernel_sizes"))
    strides, _ = spatial_args(len(shape), get("strides"), None, kernel)
    pad_type = get("pad_type")
    ceil_mode = bool(get("ceil_mode") or False)
    padding = pads(pad_type, shape[2:], kernel, strides, get("pad"))
    if ceil_mode:
        if len(shape) > 4 or pad_type in ("same", "same_lower"):
            raise WindowError("ceil_mode", "only for 1-D and 2-D pools with valid or custom pads")
        if any(before != after for before, after in padding):
            raise WindowError("pad", "ceil_mode needs symmetric pads")
    return kernel, strides, padding, out_sizes(shape[2:], kernel, strides, padding, ceil_mode)


def _pool_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    try:
        *_, out = _geometry(x.shape, call.const)
    except WindowError as exc:
        raise call.fail(exc.arg, str(exc)) from None
    return [TensorType(x.dtype, (*x.shape[:2], *out))]


@dataclass(frozen=True)
class PoolPlan:
    """A pool's windows: per spatial axis the padding (ceil mode's overhang after the rest),
    the output size, and per output element how many positions its average divides by."""

    kernel: list[int]
    strides: list[int]
    widths: list[tuple[int, int]]
    out: list[int]
    divisor: np.ndarray

    def padded(self, x: np.ndarray, fill: float) -> np.ndarray:
        return np.pad(x, [(0, 0)] * (x.ndim - len(self.widths)) + self.widths, constant_values=fill)

    def windows(self, padded: np.ndarray) -> Iterator[np.ndarray]:
        for _, view in windows(padded, self.kernel, self.strides, self.out):
            yield view


def pool_plan(shape: Sequence[int], get) -> PoolPlan:
    """The windows of a pool over `shape`; `get` reads an argument (an Args' or a Step's)."""
    kernel, strides, padding, out = _geometry(shape, get)
    overhang = [
        max(0, (o - 1) * s + k - (size + before + after))
        for o, s, k, size, (before, after) in zip(
            out, strides, kernel, shape[2:], padding, strict=True
        )
    ]
    widths = [(b, a + extra) for (b, a), extra in zip(padding, overhang, strict=True)]
    counted = np.ones(shape[2:])
    if get("exclude_padding_from_average"):
        counted = np.pad(counted, widths)
    else:
        counted = np.pad(np.pad(counted, padding, constant_values=1), [(0, e) for e in overhang])
    plan = PoolPlan(kernel, strides, widths, out, np.zeros(out))
    for view in plan.windows(counted):
        plan.divisor[...] += view
    return plan


def _max_pool(a: Args) -> np.ndarray:
    x = a.f64("x")
    plan = pool_plan(x.shape, a.const)
    result = np.full((*x.shape[:2], *plan.out), -np.inf)
    for view in plan.windows(plan.padded(x, -np.inf)):
        result = np.maximum(result, view)
    return result


def _avg_pool(a: Args) -> np.ndarray:
    x = a.f64("x")
    plan = pool_plan(x.shape, a.const)
    total = np.zeros((*x.shape[:2], *plan.out))
    for view in plan.windows(plan.padded(x, 0.0)):
        total += view
    return total / plan.divisor


def _pool_flops(op: Operation) -> int:
    kernel = op.inputs["kernel_sizes"]
    assert not isinstance(kernel, tuple) and kernel.op is not None and kernel.op.value is not None
    return output_flops(op) * math.prod(np.asarray(kernel.op.value.stored()).tolist())


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "avg_pool",
        F,
        Form(_AVG_ARGS, _pool_type, FLOAT_T),
        meaning=_avg_pool,
        graph=GraphUse(
            "mean of each window over the spatial axes (kernel_sizes, strides, pad_type, pad, "
            "ceil_mode, exclude_padding_from_average)",
            4 * U,
        ),
        ane=swept(0.00021),
        flops=_pool_flops,
        histogram={17: Seen(16, src.PUBLISHED)},
    ),
    OpRecord(
        "max_pool",
        F,
        Form(_POOL_ARGS, _pool_type, FLOAT_T),
        meaning=_max_pool,
        graph=GraphUse("maximum of each window over the spatial axes (as avg_pool)", 0.0),
        ane=swept(0.0),
        flops=_pool_flops,
    ),
)
