"""matmul: y = x·Wᵀ for tokens on the ANE layout; static W is a 1×1 conv (seed GenMatmul)."""

from __future__ import annotations

import numpy as np

from app.kernels.common import FP16, cast_in, cast_out, conv1x1
from app.kernels.spec import Kernel, WeightDoc, WeightSpec
from app.mil import Builder, DType
from app.schemas import MatmulParams


def weights(p: MatmulParams) -> list[WeightSpec]:
    if p.dynamic:
        return []
    return [
        WeightSpec(
            "weight",
            (p.out_features, p.in_features, 1, 1),
            "[out_features, in_features, 1, 1]",
            FP16,
            also_accepts=((p.out_features, p.in_features),),
            init_scale=p.in_features**-0.5,
        )
    ]


def build(b: Builder, p: MatmulParams, w: dict[str, np.ndarray]):
    io = DType(p.io_dtype)
    x = b.input("x", io, (1, p.in_features, 1, p.tokens))
    if not p.dynamic:
        weight = b.const("weight", w["weight"], FP16)
        y = conv1x1(b, "y" if io == FP16 else "matmul", cast_in(b, x, FP16), weight)
        return [cast_out(b, y, io)]
    # Runtime weights: [out, in] @ [1, in, tokens] -> [1, out, tokens], back to [1, out, 1, tokens].
    w_in = b.input("w", io, (p.out_features, p.in_features))
    x3 = b.op("reshape", "x_rows", x=cast_in(b, x, FP16), shape=[1, p.in_features, p.tokens])
    prod = b.op(
        "matmul", "matmul", x=cast_in(b, w_in, FP16), y=x3, transpose_x=False, transpose_y=False
    )
    y = b.op(
        "reshape", "y" if io == FP16 else "y_fp16", x=prod, shape=[1, p.out_features, 1, p.tokens]
    )
    return [cast_out(b, y, io)]


KERNEL = Kernel(
    name="matmul",
    summary="y = x·Wᵀ on [1, in_features, 1, tokens]; W static (1×1 conv) or a runtime input",
    params=MatmulParams,
    build=build,
    weights=weights,
    weight_docs=(
        WeightDoc(
            "weight",
            "[out_features, in_features] or [out_features, in_features, 1, 1]",
            "when dynamic is false",
        ),
    ),
    inputs={
        "x": "[1, in_features, 1, tokens] io_dtype",
        "w": "[out_features, in_features] io_dtype (dynamic only)",
    },
    outputs={"y": "[1, out_features, 1, tokens] io_dtype"},
)
