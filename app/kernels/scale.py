"""scale: y = x · scale[c], a depthwise 1×1 conv (the seed's GenScaleFP16IO is channels=1)."""

from __future__ import annotations

import numpy as np

from app.kernels.common import FP16, cast_in, cast_out, conv1x1
from app.kernels.spec import Kernel, WeightDoc, WeightSpec
from app.mil import Builder, DType
from app.schemas import ScaleParams


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


KERNEL = Kernel(
    name="scale",
    summary="per-channel scale y = x · scale[c] (depthwise 1×1 convolution)",
    params=ScaleParams,
    build=build,
    weights=weights,
    weight_docs=(WeightDoc("scale", "[channels]"),),
    inputs={"x": "[1, channels, 1, spatial] io_dtype"},
    outputs={"y": "[1, channels, 1, spatial] io_dtype"},
)
