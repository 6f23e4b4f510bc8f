"""conv: a 1×1 convolution, the ANE's linear layer (seed GenConv / GenConvFP16IO / GenConvFP32)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from app.kernels.common import (
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


class ConvParams(OpParams):
    """1×1 convolution y = W·x (+ b) on the ANE layout [1, C, 1, S]."""

    in_channels: Dim
    out_channels: Dim
    spatial: Dim = Field(description="S, the length of the last axis")
    io_dtype: IODType = Field("fp16", description="fp32 I/O is cast to and from fp16 inside")
    weight_dtype: Literal["fp16", "fp32"] = Field(
        "fp16", description="fp32 keeps weights and compute in fp32 (the ANE computes in fp16 only)"
    )
    bias: bool = False


def weights(p: ConvParams) -> list[WeightSpec]:
    dtype = DType(p.weight_dtype)
    specs = [
        WeightSpec(
            "weight",
            (p.out_channels, p.in_channels, 1, 1),
            "[out_channels, in_channels, 1, 1]",
            dtype,
            also_accepts=((p.out_channels, p.in_channels),),
            init_scale=p.in_channels**-0.5,
            quantizable=True,
        )
    ]
    if p.bias:
        specs.append(WeightSpec("bias", (p.out_channels,), "[out_channels]", dtype, init_scale=0.1))
    return specs


def build(b: Builder, p: ConvParams, w: dict[str, np.ndarray]):
    io, compute = DType(p.io_dtype), DType(p.weight_dtype)
    x = b.input("x", io, (1, p.in_channels, 1, p.spatial))
    weight = b.const("weight", w["weight"], compute)
    bias = b.const("bias", w["bias"], compute) if p.bias else None
    y = conv1x1(b, "conv" if io != compute else "y", cast_in(b, x, compute), weight, bias)
    return [cast_out(b, y, io)]


def definition(p: ConvParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[o, s] = Σ_c W[o, c]·x[c, s] + b[o]."""
    w = f64(weights["weight"]).reshape(p.out_channels, p.in_channels)
    y = w @ channels_by_tokens(inputs["x"])
    if p.bias:
        y = y + f64(weights["bias"])[:, None]
    return {"y": ane_layout(y)}, {}


def param_space(d: Draw) -> dict[str, Any]:
    return {
        "in_channels": d.dim(),
        "out_channels": d.dim(),
        "spatial": d.dim(63),
        "io_dtype": d.cycle(("fp16", "fp32")),
        "weight_dtype": d.cycle(("fp16", "fp16", "fp32", "fp32")),
        "bias": d.cycle((True, False, False)),
    }


OP = CatalogOp(
    name="conv",
    summary="1×1 convolution y = W·x (+ b) on [1, C, 1, S]",
    params=ConvParams,
    build=build,
    definition=definition,
    # fp16 weights, fp16 output. The worst error of the seeded sweep (app/reference/sweep.py)
    # over random shapes is 4.6e-4: fp16's unit roundoff is 2⁻¹¹ ≈ 4.9e-4.
    tolerance=2e-3,
    examples=(
        {"in_channels": 4, "out_channels": 8, "spatial": 2},
        {"in_channels": 4, "out_channels": 8, "spatial": 2, "io_dtype": "fp32", "bias": True},
        {"in_channels": 4, "out_channels": 4, "spatial": 1, "weight_dtype": "fp32"},
    ),
    param_space=param_space,
    weights=weights,
    weight_docs=(
        WeightDoc("weight", "[out_channels, in_channels] or [out_channels, in_channels, 1, 1]"),
        WeightDoc("bias", "[out_channels]", "when bias is true"),
    ),
    inputs={"x": "[1, in_channels, 1, spatial] io_dtype"},
    outputs={"y": "[1, out_channels, 1, spatial] io_dtype"},
    bind=bind_ane_input("in_channels"),
)
