"""matmul: y = x·Wᵀ for tokens on the ANE layout; static W is a 1×1 conv (seed GenMatmul)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field

from app.kernels.common import (
    FP16,
    ane_dims,
    ane_layout,
    cast_in,
    cast_out,
    channels_by_tokens,
    conv1x1,
    f64,
)
from app.kernels.op import Arrays, CatalogOp, WeightDoc, WeightSpec
from app.kernels.params import Dim, IODType, OpParams
from app.kernels.space import Draw
from app.mil import Builder, DType, TensorType


class MatmulParams(OpParams):
    """y = x·Wᵀ for tokens laid out as [1, in_features, 1, tokens]."""

    in_features: Dim
    out_features: Dim
    tokens: Dim
    io_dtype: IODType = "fp16"
    dynamic: bool = Field(
        False, description="take W as a second runtime input `w` instead of a weight"
    )


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
            quantizable=True,
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


def definition(p: MatmulParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[:, t] = W·x[:, t] for each token t, W static or the runtime input `w`."""
    w = inputs["w"] if p.dynamic else weights["weight"]
    w = f64(w).reshape(p.out_features, p.in_features)
    return {"y": ane_layout(w @ channels_by_tokens(inputs["x"]))}, {}


def bind(inputs: Mapping[str, TensorType]) -> dict[str, Any]:
    x, w = inputs.get("x"), inputs.get("w")
    dims = ane_dims(x)
    if x is None or dims is None:
        return {}
    bound: dict[str, Any] = {"in_features": dims[0], "tokens": dims[1], "io_dtype": x.dtype.value}
    if w is not None and w.rank == 2:  # the weight as a second input
        bound.update(dynamic=True, out_features=w.shape[0])
    return bound


def param_space(d: Draw) -> dict[str, Any]:
    return {
        "in_features": d.dim(),
        "out_features": d.dim(),
        "tokens": d.dim(63),
        "io_dtype": d.cycle(("fp16", "fp32")),
        "dynamic": d.cycle((True, False, False)),
    }


OP = CatalogOp(
    name="matmul",
    summary="y = x·Wᵀ on [1, in_features, 1, tokens]; W static (1×1 conv) or a runtime input",
    params=MatmulParams,
    build=build,
    definition=definition,
    tolerance=2e-3,  # as conv, static or runtime W: the sweep's worst is 6.5e-4
    examples=(
        {"in_features": 4, "out_features": 8, "tokens": 3},
        {"in_features": 4, "out_features": 8, "tokens": 3, "dynamic": True},
        {"in_features": 16, "out_features": 8, "tokens": 5, "io_dtype": "fp32"},
    ),
    param_space=param_space,
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
    bind=bind,
)
