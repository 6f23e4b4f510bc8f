"""Small building blocks shared by several ops: program pieces and float64 layout helpers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from app.mil import Builder, DType, TensorType, Var

FP16 = DType.FP16
CONV_1X1: dict[str, Any] = {
    "strides": [1, 1],
    "pad_type": "valid",
    "pad": [0, 0, 0, 0],
    "dilations": [1, 1],
}


def cast_in(b: Builder, x: Var, compute: DType) -> Var:
    """Cast an input to the compute dtype when the I/O dtype differs (fp32 I/O, fp16 compute)."""
    if x.tensor.dtype == compute:
        return x
    return b.op("cast", f"{x.name}_{compute.value}", x=x, dtype=compute.value)


def cast_out(b: Builder, y: Var, io: DType, name: str = "y") -> Var:
    """Return `y` in the I/O dtype, named `name` (the program output)."""
    if y.tensor.dtype == io:
        return y
    return b.op("cast", name, x=y, dtype=io.value)


def conv1x1(
    b: Builder, name: str, x: Var, weight: Var, bias: Var | None = None, groups: int = 1
) -> Var:
    return b.op("conv", name, x=x, weight=weight, bias=bias, groups=groups, **CONV_1X1)


def ane_dims(t: TensorType | None) -> tuple[int, int] | None:
    """(C, S) of a tensor in the ANE layout [1, C, 1, S], None for any other shape."""
    if t is None or t.rank != 4 or t.shape[0] != 1 or t.shape[2] != 1:
        return None
    return t.shape[1], t.shape[3]


def bind_ane_input(channels: str, spatial: str = "spatial", io_dtype: bool = True):
    """The graph binding of an op reading one input `x` in the ANE layout: its C and S fix the
    params named `channels` and `spatial` (and its dtype `io_dtype`, when the op has one)."""

    def bind(inputs: Mapping[str, TensorType]) -> dict[str, Any]:
        x = inputs.get("x")
        dims = ane_dims(x)
        if x is None or dims is None:
            return {}
        bound: dict[str, Any] = {channels: dims[0], spatial: dims[1]}
        if io_dtype:
            bound["io_dtype"] = x.dtype.value
        return bound

    return bind


# -- float64 definitions ---------------------------------------------------------------------------


def f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def channels_by_tokens(x: np.ndarray) -> np.ndarray:
    """[1, C, 1, S] (the ANE layout) -> [C, S], in float64."""
    return f64(x)[0, :, 0, :]


def ane_layout(y: np.ndarray) -> np.ndarray:
    """[C, S] -> [1, C, 1, S]."""
    return y[None, :, None, :]
