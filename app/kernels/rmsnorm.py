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
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import Field

from app.kernels.common import FP16, ane_layout, bind_ane_input, channels_by_tokens, f64
from app.kernels.op import Arrays, CatalogOp, WeightDoc, WeightSpec
from app.kernels.params import Dim, OpParams
from app.kernels.space import Draw
from app.mil import Builder, Var


class RMSNormParams(OpParams):
    """y = x / sqrt(mean(x², over channels) + eps) · w, safe from fp16 overflow."""

    channels: Dim
    spatial: Dim
    eps: float = Field(1e-5, gt=0, le=1)
    variant: Literal["safe", "l2norm"] = Field(
        "safe", description="safe: square + reduce_mean; l2norm: reduce_l2_norm (faster for wide C)"
    )


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


def normalize(
    b: Builder,
    x: Var,
    channels: int,
    eps: float,
    variant: str = "safe",
    name: Callable[[str], str] = str,
    axis: int = 1,
) -> Var:
    """x / sqrt(mean(x², over `axis`) + eps), overflow-safe in fp16, for x [1, channels, 1, S]
    (or, with axis 2, per head over head_dim of [1, heads, head_dim, S]); `name` turns each op's
    base name into its name in the program (a prefix in a larger one)."""
    axes, keep = b.const(name("axes"), [axis]), b.const(name("keep_dims"), True)
    m = b.op(
        "maximum",
        name("m"),
        x=b.op(
            "reduce_max",
            name("max_abs"),
            x=b.op("abs", name("abs_x"), x=x),
            axes=axes,
            keep_dims=keep,
        ),
        y=1.0,
    )
    xn = b.op("real_div", name("x_scaled"), x=x, y=m)
    if variant == "safe":
        mean_sq = b.op(
            "reduce_mean",
            name("mean_sq"),
            x=b.op("square", name("sq"), x=xn),
            axes=axes,
            keep_dims=keep,
        )
    else:
        norm = b.op("reduce_l2_norm", name("l2"), x=xn, axes=axes, keep_dims=keep)
        mean_sq = b.op(
            "square",
            name("mean_sq"),
            x=b.op("mul", name("rms_scaled"), x=norm, y=1 / math.sqrt(channels)),
        )
    eps_term = b.op(
        "square",
        name("eps_scaled"),
        x=b.op(
            "real_div",
            name("sqrt_eps_scaled"),
            x=b.const(name("sqrt_eps"), np.float16(math.sqrt(eps)), FP16),
            y=m,
        ),
    )
    rms = b.op(
        "mul",
        name("rms"),
        x=b.op("sqrt", name("rms_unit"), x=b.op("add", name("mean_sq_eps"), x=mean_sq, y=eps_term)),
        y=m,
    )
    return b.op("real_div", name("normed"), x=x, y=rms)


def build(b: Builder, p: RMSNormParams, w: dict[str, np.ndarray]):
    x = b.input("x", FP16, (1, p.channels, 1, p.spatial))
    normed = normalize(b, x, p.channels, p.eps, p.variant)
    return [b.op("mul", "y", x=normed, y=b.const("weight", w["weight"], FP16))]


def definition(p: RMSNormParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[c, s] = x[c, s] / sqrt(mean_c x[c, s]² + eps)·w[c]; both variants mean the same."""
    x = channels_by_tokens(inputs["x"])
    w = f64(weights["weight"]).reshape(p.channels)
    rms = np.sqrt(np.mean(x * x, axis=0) + p.eps)
    return {"y": ane_layout(x / rms[None, :] * w[:, None])}, {}


def param_space(d: Draw) -> dict[str, Any]:
    return {
        "channels": d.dim(),
        "spatial": d.dim(63),
        "eps": d.log_uniform(1e-6, 1e-2),
        "variant": d.cycle(("safe", "l2norm")),
    }


OP = CatalogOp(
    name="rmsnorm",
    summary="RMSNorm over channels, y = x / sqrt(mean(x²) + eps) · w, overflow-safe in fp16",
    params=RMSNormParams,
    build=build,
    definition=definition,
    # ten chained fp16 ops, |x| up to 60000, eps 1e-6..1e-2: the sweep's worst is 1.6e-3
    tolerance=4e-3,
    examples=(
        {"channels": 16, "spatial": 2},
        {"channels": 16, "spatial": 2, "variant": "l2norm", "eps": 1e-6},
    ),
    param_space=param_space,
    weights=weights,
    weight_docs=(WeightDoc("weight", "[channels]"),),
    inputs={"x": "[1, channels, 1, spatial] fp16"},
    outputs={"y": "[1, channels, 1, spatial] fp16"},
    bind=bind_ane_input("channels", io_dtype=False),
)
