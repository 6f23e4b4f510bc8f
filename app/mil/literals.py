"""Plain Python values given as op arguments, checked as data before NumPy sees them.

A literal is a number, a bool, or a rectangular list (or tuple) of them, nested at most
`MAX_RANK` deep. A request's JSON can hold anything else (objects, ragged or deeply nested
lists, integers of any size), and NumPy would either refuse it with an unrelated error or,
worse, take it: an integer past int32 silently wraps around when stored as int32. So every
integer must lie in its dtype's range (int32 unless declared otherwise) and every float must be
finite and within its dtype (fp32 unless declared otherwise).
"""

from __future__ import annotations

import math

import numpy as np

from app.mil.ir import MILBuildError
from app.mil.types import DType

MAX_RANK = 5
_FLOAT_MAX = {DType.FP16: 65504.0, DType.FP32: float(np.finfo(np.float32).max)}


def _scalars(value, name: str) -> list:
    """The scalars of a rectangular literal, in order."""
    level, depth = [value], 0
    while any(isinstance(v, list | tuple) for v in level):
        depth += 1
        if depth > MAX_RANK or not all(isinstance(v, list | tuple) for v in level):
            raise MILBuildError(
                "const",
                name,
                f"a list nested more than {MAX_RANK} deep, or one mixing lists and numbers",
            )
        lengths = {len(v) for v in level}
        if len(lengths) > 1:
            raise MILBuildError("const", name, "a ragged list (rows of different lengths)")
        level = [x for v in level for x in v]
    for v in level:
        if not isinstance(v, bool | int | float | np.bool_ | np.integer | np.floating):
            raise MILBuildError(
                "const", name, f"a {type(v).__name__} where a number, a bool or a list is expected"
            )
    return level


def check_literal(value, dtype: DType | None, name: str) -> None:
    """Refuse a literal that is not a rectangular list of numbers or bools, or one whose numbers
    do not fit `dtype` (int32 for integers, fp32 for floats, when it is None)."""
    if _plain_int32(value, dtype):
        return
    scalars = _scalars(value, name)
    numbers = [v for v in scalars if not isinstance(v, bool | np.bool_)]
    if not numbers:
        return
    floats = any(isinstance(v, float | np.floating) for v in numbers)
    if dtype is not None and dtype.is_int:
        _check_ints(numbers, dtype, name)
    elif dtype is None and not floats:
        _check_ints(numbers, DType.INT32, name)
    else:
        _check_floats(numbers, dtype or DType.FP32, name)


_INT32 = DType.INT32.int_range


def _plain_int32(value, dtype: DType | None) -> bool:
    """The builder's own arguments (strides, pads, axes, shapes) are a Python int or a flat list
    of them that fit int32: answered without the general walk, which every op would pay."""
    if dtype not in (None, DType.INT32):
        return False
    if type(value) is int:
        return _INT32[0] <= value <= _INT32[1]
    if type(value) not in (list, tuple) or not value or len(value) > 16:
        return False
    return (
        all(type(v) is int for v in value) and _INT32[0] <= min(value) and max(value) <= _INT32[1]
    )


def _check_ints(numbers: list, dtype: DType, name: str) -> None:
    lo, hi = dtype.int_range
    for v in numbers:
        whole = not isinstance(v, float | np.floating) or (
            math.isfinite(v) and float(v).is_integer()
        )
        if not whole or not lo <= int(v) <= hi:
            raise MILBuildError("const", name, f"{v} is outside {dtype.value} [{lo}, {hi}]")


def _check_floats(numbers: list, dtype: DType, name: str) -> None:
    top = _FLOAT_MAX.get(dtype, _FLOAT_MAX[DType.FP32])
    for v in numbers:
        try:
            f = float(v)
        except OverflowError:  # an integer past any float
            f = math.inf
        if not math.isfinite(f) or abs(f) > top:
            raise MILBuildError("const", name, f"{v} is not a finite {dtype.value} value")
