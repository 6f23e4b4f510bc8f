"""conv: a 1×1 convolution, the ANE's linear layer (seed GenConv / GenConvFP16IO / GenConvFP32)."""

from __future__ import annotations

import numpy as np

from app.kernels.common import cast_in, cast_out, conv1x1
from app.kernels.spec import Kernel, WeightDoc, WeightSpec
from app.mil import Builder, DType
from app.schemas import ConvParams


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


KERNEL = Kernel(
    name="conv",
    summary="1×1 convolution y = W·x (+ b) on [1, C, 1, S]",
    params=ConvParams,
    build=build,
    weights=weights,
    weight_docs=(
        WeightDoc("weight", "[out_channels, in_channels] or [out_channels, in_channels, 1, 1]"),
        WeightDoc("bias", "[out_channels]", "when bias is true"),
    ),
    inputs={"x": "[1, in_channels, 1, spatial] io_dtype"},
    outputs={"y": "[1, out_channels, 1, spatial] io_dtype"},
)
