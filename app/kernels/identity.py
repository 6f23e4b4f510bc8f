"""identity: y = x through a 1×1 conv with identity weights (seed GenIdentity / GenIdentityFP16IO)."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.kernels.common import FP16, bind_ane_input, cast_in, cast_out, conv1x1, f64
from app.kernels.op import Arrays, CatalogOp
from app.kernels.params import Dim, IODType, OpParams
from app.kernels.space import Draw
from app.mil import Builder, DType


class IdentityParams(OpParams):
    """y = x, through a 1×1 convolution with identity weights."""

    channels: Dim
    spatial: Dim
    io_dtype: IODType = "fp16"


def build(b: Builder, p: IdentityParams, w: dict[str, np.ndarray]):
    io = DType(p.io_dtype)
    x = b.input("x", io, (1, p.channels, 1, p.spatial))
    eye = np.eye(p.channels, dtype=np.float16).reshape(p.channels, p.channels, 1, 1)
    y = conv1x1(b, "y" if io == FP16 else "conv", cast_in(b, x, FP16), b.const("weight", eye, FP16))
    return [cast_out(b, y, io)]


def definition(p: IdentityParams, inputs: Arrays, weights: Arrays, states: Arrays):
    return {"y": f64(inputs["x"])}, {}


def param_space(d: Draw) -> dict[str, Any]:
    return {"channels": d.dim(), "spatial": d.dim(63), "io_dtype": d.cycle(("fp16", "fp32"))}


OP = CatalogOp(
    name="identity",
    summary="y = x via a 1×1 convolution with identity weights (a round-trip probe)",
    params=IdentityParams,
    build=build,
    definition=definition,
    # exact for fp16 I/O; fp32 I/O pays one cast to fp16: the sweep's worst is 4.5e-4
    tolerance=1e-3,
    examples=(
        {"channels": 4, "spatial": 2},
        {"channels": 4, "spatial": 2, "io_dtype": "fp32"},
    ),
    param_space=param_space,
    inputs={"x": "[1, channels, 1, spatial] io_dtype"},
    outputs={"y": "[1, channels, 1, spatial] io_dtype"},
    bind=bind_ane_input("channels"),
)
