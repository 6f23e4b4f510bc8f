"""gqa_expand: repeat kv_heads key/value heads to q_heads for grouped-query attention.

`repeat_kv` (Llama's order: query head h reads kv head h // r) interleaves r copies along the head
axis; `tile` (the seed's order, h % kv_heads) repeats the whole block.
"""

from __future__ import annotations

import numpy as np

from app.kernels.common import FP16
from app.kernels.spec import Kernel
from app.mil import Builder
from app.schemas import GQAExpandParams


def build(b: Builder, p: GQAExpandParams, w: dict[str, np.ndarray]):
    x = b.input("x", FP16, (1, p.kv_heads, p.seq_len, p.head_dim))
    r = p.q_heads // p.kv_heads
    if p.order == "tile" or r == 1:
        return [b.op("tile", "y", x=x, reps=[1, r, 1, 1])]
    return [b.op("concat", "y", values=(x,) * r, axis=1, interleave=True)]


KERNEL = Kernel(
    name="gqa_expand",
    summary="expand KV heads to query heads (repeat_kv or tile order)",
    params=GQAExpandParams,
    build=build,
    inputs={"x": "[1, kv_heads, seq_len, head_dim] fp16"},
    outputs={"y": "[1, q_heads, seq_len, head_dim] fp16"},
)
