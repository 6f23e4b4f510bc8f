"""scale: y = x · scale[c], a depthwise 1×1 conv (the seed's GenScaleFP16IO is channels=1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.kernels.common import (
    FP16,
    ane_layout,
    bind_ane_input,
    cast_in,
    cast_out,
    channels_by_tokens,
    conv1x1,
    f64,
)
from app.kernels.op import Arrays, CatalogOp, WeightDoc, WeightSpec
from app.kernels.params import Dim, IODType, OpParams
from app.kernels.space import Draw
from app.mil import Builder, DType


class ScaleParams(OpParams):
    """y = x · scale per channel (a depthwise 1×1 convolution)."""

    channels: Dim
    spatial: Dim
    io_dtype: IODType = "fp16"


def weights(p: ScaleParams) -> list[WeightSpec]:
    return [
        WeightSpec(
            "scale",
            (p.channels, 1, 1, 1),
            "[channels]",
            FP16,
            also_accepts=((p.channels,), (1, p.channels, 1, 1)),
            init_scale=0.5,
            init_offset=1.0,
        )
    ]


def build(b: Builder, p: ScaleParams, w: dict[str, np.ndarray]):
    io = DType(p.io_dtype)
    x = b.input("x", io, (1, p.channels, 1, p.spatial))
    scale = b.const("scale", w["scale"], FP16)
    y = conv1x1(b, "y" if io == FP16 else "conv", cast_in(b, x, FP16), scale, groups=p.channels)
    return [cast_out(b, y, io)]


def definition(p: ScaleParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[c, s] = x[c, s]·scale[c]."""
    s = f64(weights["scale"]).reshape(p.channels)
    return {"y": ane_layout(channels_by_tokens(inputs["x"]) * s[:, None])}, {}


def param_space(d: Draw) -> dict[str, Any]:
    return {"channels": d.dim(), "spatial": d.dim(63), "io_dtype": d.cycle(("fp16", "fp32"))}


OP = CatalogOp(
    name="scale",
    summary="per-channel scale y = x · scale[c] (depthwise 1×1 convolution)",
    params=ScaleParams,
    build=build,
    definition=definition,
    tolerance=2e-3,  # fp16 scale × fp16 x, one rounding: the sweep's worst is 6.7e-4
    examples=(
        {"channels": 3, "spatial": 2},
        {"channels": 1, "spatial": 7, "io_dtype": "fp32"},
    ),
    param_space=param_space,
    weights=weights,
    weight_docs=(WeightDoc("scale", "[channels]"),),
    inputs={"x": "[1, channels, 1, spatial] io_dtype"},
    outputs={"y": "[1, channels, 1, spatial] io_dtype"},
    bind=bind_ane_input("channels"),
)
