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

import numpy as np

from app.kernels.common import FP16
from app.kernels.spec import Kernel, KernelSpecError
from app.mil import Builder
from app.schemas import SDPAParams

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
        raise KernelSpecError(
            "params.seq_len", f"a causal mask of {p.seq_len}×{p.kv_len} is too large"
        )
    scores = b.op("matmul", "scores", x=qs, y=k, transpose_x=False, transpose_y=True)
    masked = b.op(
        "add", "masked_scores", x=scores, y=b.const("mask", causal_mask(p.seq_len, p.kv_len), FP16)
    )
    probs = b.op("softmax", "probs", x=masked, axis=-1)
    return [b.op("matmul", "y", x=probs, y=v, transpose_x=False, transpose_y=False)]


KERNEL = Kernel(
    name="sdpa",
    summary="scaled dot-product attention, optionally causal (decomposed: the ANE ignores attn_mask)",
    params=SDPAParams,
    build=build,
    inputs={
        "q": "[1, n_heads, seq_len, head_dim] fp16",
        "k": "[1, n_heads, kv_seq_len, head_dim] fp16",
        "v": "[1, n_heads, kv_seq_len, head_dim] fp16",
    },
    outputs={"y": "[1, n_heads, seq_len, head_dim] fp16"},
)
