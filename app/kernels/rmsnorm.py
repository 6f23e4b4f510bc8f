"""rmsnorm: y = x / sqrt(mean(x²) + eps) · w over channels, safe from fp16 overflow.

x² overflows fp16 once |x| > 256, so the input is first divided by m = max(max|x|, 1). Then
    sqrt(mean(x²) + eps) = m · sqrt(mean((x/m)²) + (sqrt(eps)/m)²)
which keeps eps meaning what users mean (the plain max-rescaled form computes
sqrt(mean(x²) + eps·m²)). The floor of 1 keeps (sqrt(eps)/m)² ≤ eps, and an all-zero row gives
0 / sqrt(eps) = 0, never 0/0. `keep_dims` is a named const and the weight is [1, C, 1, 1]: the
ANE compiler rejects inline keep_dims and rank-1 broadcast weights.
"""

from __future__ import annotations

import math

import numpy as np

from app.kernels.common import FP16
from app.kernels.spec import Kernel, WeightDoc, WeightSpec
from app.mil import Builder
from app.schemas import RMSNormParams


def weights(p: RMSNormParams) -> list[WeightSpec]:
    return [
        WeightSpec(
            "weight",
            (1, p.channels, 1, 1),
            "[channels]",
            FP16,
            also_accepts=((p.channels,),),
            init_scale=0.1,
            init_offset=1.0,
        )
    ]


def build(b: Builder, p: RMSNormParams, w: dict[str, np.ndarray]):
    x = b.input("x", FP16, (1, p.channels, 1, p.spatial))
    axes, keep = b.const("axes", [1]), b.const("keep_dims", True)
    m = b.op(
        "maximum",
        "m",
        x=b.op("reduce_max", "max_abs", x=b.op("abs", "abs_x", x=x), axes=axes, keep_dims=keep),
        y=1.0,
    )
    xn = b.op("real_div", "x_scaled", x=x, y=m)
    if p.variant == "safe":
        mean_sq = b.op(
            "reduce_mean", "mean_sq", x=b.op("square", "sq", x=xn), axes=axes, keep_dims=keep
        )
    else:
        norm = b.op("reduce_l2_norm", "l2", x=xn, axes=axes, keep_dims=keep)
        mean_sq = b.op(
            "square", "mean_sq", x=b.op("mul", "rms_scaled", x=norm, y=1 / math.sqrt(p.channels))
        )
    eps_term = b.op(
        "square",
        "eps_scaled",
        x=b.op(
            "real_div",
            "sqrt_eps_scaled",
            x=b.const("sqrt_eps", np.float16(math.sqrt(p.eps)), FP16),
            y=m,
        ),
    )
    rms = b.op(
        "mul",
        "rms",
        x=b.op("sqrt", "rms_unit", x=b.op("add", "mean_sq_eps", x=mean_sq, y=eps_term)),
        y=m,
    )
    normed = b.op("real_div", "normed", x=x, y=rms)
    return [b.op("mul", "y", x=normed, y=b.const("weight", w["weight"], FP16))]


KERNEL = Kernel(
    name="rmsnorm",
    summary="RMSNorm over channels, y = x / sqrt(mean(x²) + eps) · w, overflow-safe in fp16",
    params=RMSNormParams,
    build=build,
    weights=weights,
    weight_docs=(WeightDoc("weight", "[channels]"),),
    inputs={"x": "[1, channels, 1, spatial] fp16"},
    outputs={"y": "[1, channels, 1, spatial] fp16"},
)
