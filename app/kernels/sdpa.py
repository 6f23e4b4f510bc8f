"""sdpa: softmax(Q·Kᵀ·scale)·V on [1, heads, seq, head_dim].

The iOS18 op has no `scale` argument (passing one makes the ANE compiler reject the program) and
always divides Q·Kᵀ by √head_dim itself, so a requested scale is applied by multiplying Q by
scale·√head_dim first; the default scale (1/√head_dim) needs no multiply at all. Causal attention
spells the scale out in full, because it does not use the op. The ANE ignores attn_mask, so causal
attention is spelled out:
matmul(transpose_y) → add a mask const → softmax → matmul. Queries are the last seq_len of the
kv_seq_len positions, as when decoding with a KV cache.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from app.errors import RequestError
from app.kernels.common import FP16, f64
from app.kernels.op import Arrays, CatalogOp
from app.kernels.params import Dim, OpParams
from app.kernels.space import Draw
from app.mil import Builder, TensorType


class SDPAParams(OpParams):
    """softmax(Q·Kᵀ·scale)·V over [1, heads, seq, head_dim]."""

    n_heads: Dim
    head_dim: Dim
    seq_len: Dim
    kv_seq_len: Dim | None = Field(None, description="defaults to seq_len")
    causal: bool = False
    scale: float | None = Field(None, gt=0, description="defaults to 1/sqrt(head_dim)")

    @model_validator(mode="after")
    def _causal_needs_keys(self) -> SDPAParams:
        if self.causal and self.kv_len < self.seq_len:
            raise ValueError(
                "causal attention needs kv_seq_len >= seq_len (queries are the last positions)"
            )
        return self

    @property
    def kv_len(self) -> int:
        return self.kv_seq_len or self.seq_len


MASKED = -65504.0  # fp16 lowest: exp() of it is 0 without producing inf - inf = NaN
MAX_MASK_ELEMENTS = 1 << 24


def causal_mask(seq_len: int, kv_len: int) -> np.ndarray:
    query_pos = np.arange(seq_len)[:, None] + (kv_len - seq_len)
    mask = np.where(np.arange(kv_len)[None, :] <= query_pos, 0.0, MASKED).astype(np.float16)
    return mask.reshape(1, 1, seq_len, kv_len)


def build(b: Builder, p: SDPAParams, w: dict[str, np.ndarray]):
    h, d = p.n_heads, p.head_dim
    q = b.input("q", FP16, (1, h, p.seq_len, d))
    k = b.input("k", FP16, (1, h, p.kv_len, d))
    v = b.input("v", FP16, (1, h, p.kv_len, d))
    scale = p.scale if p.scale is not None else 1 / math.sqrt(d)
    if not p.causal:
        q_pre = scale * math.sqrt(d)  # undoes the op's own 1/√head_dim
        qs = q if math.isclose(q_pre, 1.0, rel_tol=1e-12) else b.op("mul", "q_scaled", x=q, y=q_pre)
        return [b.op("scaled_dot_product_attention", "y", query=qs, key=k, value=v)]
    qs = b.op("mul", "q_scaled", x=q, y=scale)
    if p.seq_len * p.kv_len > MAX_MASK_ELEMENTS:
        raise RequestError(
            "params.seq_len", f"a causal mask of {p.seq_len}×{p.kv_len} is too large"
        )
    scores = b.op("matmul", "scores", x=qs, y=k, transpose_x=False, transpose_y=True)
    masked = b.op(
        "add", "masked_scores", x=scores, y=b.const("mask", causal_mask(p.seq_len, p.kv_len), FP16)
    )
    probs = b.op("softmax", "probs", x=masked, axis=-1)
    return [b.op("matmul", "y", x=probs, y=v, transpose_x=False, transpose_y=False)]


def definition(p: SDPAParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """softmax(Q·Kᵀ·scale)·V per head; causal: query i (the last seq_len of kv_len positions)
    sees keys j <= kv_len − seq_len + i."""
    q, k, v = f64(inputs["q"]), f64(inputs["k"]), f64(inputs["v"])
    factor = p.scale if p.scale is not None else 1 / np.sqrt(p.head_dim)
    scores = np.einsum("bhid,bhjd->bhij", q, k) * factor
    if p.causal:
        seen = np.arange(p.kv_len)[None, :] <= np.arange(p.seq_len)[:, None] + p.kv_len - p.seq_len
        scores = np.where(seen, scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return {"y": np.einsum("bhij,bhjd->bhid", probs, v)}, {}


def bind(inputs: Mapping[str, TensorType]) -> dict[str, Any]:
    q, k = inputs.get("q"), inputs.get("k")
    if q is None or q.rank != 4:
        return {}
    bound = {"n_heads": q.shape[1], "seq_len": q.shape[2], "head_dim": q.shape[3]}
    if k is not None and k.rank == 4:
        bound["kv_seq_len"] = k.shape[2]
    return bound


def param_space(d: Draw) -> dict[str, Any]:
    seq_len = d.dim(63)
    return {
        "n_heads": d.integer(1, 8),
        "head_dim": d.dim(128),
        "seq_len": seq_len,
        "kv_seq_len": seq_len + d.dim(63, low=0),  # queries are the last of the keys' positions
        "causal": d.cycle((True, False)),
    }


OP = CatalogOp(
    name="sdpa",
    summary="scaled dot-product attention, optionally causal (decomposed: the ANE ignores attn_mask)",
    params=SDPAParams,
    build=build,
    definition=definition,
    tolerance=5e-3,  # fp16 scores, probabilities and output: the sweep's worst is 1.8e-3
    examples=(
        {"n_heads": 2, "head_dim": 4, "seq_len": 3},
        {"n_heads": 2, "head_dim": 4, "seq_len": 3, "kv_seq_len": 5, "causal": True},
        {"n_heads": 1, "head_dim": 8, "seq_len": 4, "kv_seq_len": 6, "scale": 0.5},
    ),
    param_space=param_space,
    inputs={
        "q": "[1, n_heads, seq_len, head_dim] fp16",
        "k": "[1, n_heads, kv_seq_len, head_dim] fp16",
        "v": "[1, n_heads, kv_seq_len, head_dim] fp16",
    },
    outputs={"y": "[1, n_heads, seq_len, head_dim] fp16"},
    bind=bind,
)
