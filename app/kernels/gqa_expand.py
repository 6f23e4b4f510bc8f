"""gqa_expand: repeat kv_heads key/value heads to q_heads for grouped-query attention.

`repeat_kv` (Llama's order: query head h reads kv head h // r) interleaves r copies along the head
axis; `tile` (the seed's order, h % kv_heads) repeats the whole block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from app.kernels.common import FP16, f64
from app.kernels.op import Arrays, CatalogOp
from app.kernels.params import Dim, OpParams
from app.kernels.space import Draw
from app.mil import Builder, TensorType


class GQAExpandParams(OpParams):
    """Repeat kv_heads key/value heads to q_heads for grouped-query attention."""

    kv_heads: Dim
    q_heads: Dim
    head_dim: Dim
    seq_len: Dim
    order: Literal["repeat_kv", "tile"] = Field(
        "repeat_kv", description="repeat_kv: head h reads kv head h // (q/kv); tile: h % kv"
    )

    @model_validator(mode="after")
    def _divisible(self) -> GQAExpandParams:
        if self.q_heads % self.kv_heads:
            raise ValueError(
                f"q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        return self


def build(b: Builder, p: GQAExpandParams, w: dict[str, np.ndarray]):
    x = b.input("x", FP16, (1, p.kv_heads, p.seq_len, p.head_dim))
    r = p.q_heads // p.kv_heads
    if p.order == "tile" or r == 1:
        return [b.op("tile", "y", x=x, reps=[1, r, 1, 1])]
    return [b.op("concat", "y", values=(x,) * r, axis=1, interleave=True)]


def definition(p: GQAExpandParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """Query head h reads kv head h // (q/kv) (repeat_kv) or h % kv (tile)."""
    heads = np.arange(p.q_heads)
    group = p.q_heads // p.kv_heads
    source = heads // group if p.order == "repeat_kv" else heads % p.kv_heads
    return {"y": f64(inputs["x"])[:, source]}, {}


def bind(inputs: Mapping[str, TensorType]) -> dict[str, Any]:
    x = inputs.get("x")
    if x is None or x.rank != 4:
        return {}
    return {"kv_heads": x.shape[1], "seq_len": x.shape[2], "head_dim": x.shape[3]}


def param_space(d: Draw) -> dict[str, Any]:
    kv_heads = d.integer(1, 4)
    return {
        "kv_heads": kv_heads,
        "q_heads": kv_heads * d.integer(1, 4),
        "head_dim": d.dim(),
        "seq_len": d.dim(16),
        "order": d.choice(("repeat_kv", "tile")),
    }


OP = CatalogOp(
    name="gqa_expand",
    summary="expand KV heads to query heads (repeat_kv or tile order)",
    params=GQAExpandParams,
    build=build,
    definition=definition,
    tolerance=0.0,  # data movement: bit-exact
    examples=(
        {"kv_heads": 2, "q_heads": 4, "head_dim": 4, "seq_len": 3},
        {"kv_heads": 2, "q_heads": 6, "head_dim": 4, "seq_len": 3, "order": "tile"},
        {"kv_heads": 3, "q_heads": 3, "head_dim": 2, "seq_len": 1},
    ),
    param_space=param_space,
    inputs={"x": "[1, kv_heads, seq_len, head_dim] fp16"},
    outputs={"y": "[1, q_heads, seq_len, head_dim] fp16"},
    bind=bind,
)
