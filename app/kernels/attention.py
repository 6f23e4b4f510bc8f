"""attention: a Llama attention block from a checkpoint's tensors, prefill or decode.

pre-RMSNorm → Q/K/V projections (+ biases, as in Qwen2) → RoPE → causal attention with GQA
(`repeat_kv` head order) → O projection → residual, with Hugging Face's semantics (see
app/kernels/transformer_reference.py for the float64 meaning, transformer_program.py for the
program). Outputs the residual stream `y` and the new keys and values for the cache, `k` and `v`
[1, num_key_value_heads, seq_len, head_dim] (keys rotated, as Hugging Face caches hold them).

- prefill: seq_len tokens at positions position_offset.., each attending to those before it;
  the RoPE tables are baked in.
- decode: seq_len new tokens after a cache of cache_len positions (`k_cache`, `v_cache`), of
  which the first `length` (an int32 input) are valid; `cos` and `sin` (rope_inputs) give the
  new tokens' rotations. The caller writes `k`, `v` into its cache at rows length.. afterwards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.kernels.op import Arrays, CatalogOp, WeightDoc
from app.kernels.space import Draw
from app.kernels.transformer_params import (
    AttentionParams,
    attention_weights,
    config_space,
    fields_of,
)
from app.kernels.transformer_program import attention, context, decode_inputs, prefixed
from app.kernels.transformer_reference import (
    ane,
    cache_layout,
    reference_context,
    states_after,
)
from app.kernels.transformer_reference import attention as attention_f64
from app.mil import Builder


class AttentionOpParams(AttentionParams):
    """A Llama attention block (pre-RMSNorm, RoPE, causal GQA, O projection, residual)."""


def build(b: Builder, p: AttentionOpParams, w: dict[str, np.ndarray]):
    ctx = context(b, p)
    y, k, v = attention(
        b, p, ctx.x, w, "", prefixed("attn_"), ctx.rope, ctx.mask, ctx.pasts[0], ("y", "k", "v")
    )
    return [y, k, v]


def definition(p: AttentionOpParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """Hugging Face's LlamaAttention (plus the pre-norm and residual of its decoder layer)."""
    x, cos, sin, pasts = reference_context(p, inputs, states=states)
    y, k, v = attention_f64(p, x, weights, "", cos, sin, pasts[0])
    after = states_after(p, states, inputs.get("length"), {"": (k, v)})
    return {"y": ane(y), "k": cache_layout(k), "v": cache_layout(v)}, after


ATTENTION_WEIGHT_DOCS = (
    WeightDoc("input_layernorm.weight", "[hidden_size]"),
    WeightDoc("self_attn.q_proj.weight", "[num_attention_heads·head_dim, hidden_size]"),
    WeightDoc("self_attn.k_proj.weight", "[num_key_value_heads·head_dim, hidden_size]"),
    WeightDoc("self_attn.v_proj.weight", "[num_key_value_heads·head_dim, hidden_size]"),
    WeightDoc("self_attn.o_proj.weight", "[hidden_size, num_attention_heads·head_dim]"),
    WeightDoc("self_attn.{q,k,v}_proj.bias", "[rows of the projection]", "when attention_bias"),
    WeightDoc(
        "self_attn.o_proj.bias", "[hidden_size]", "when o_proj_bias (default attention_bias)"
    ),
    WeightDoc("self_attn.{q,k}_norm.weight", "[head_dim]", "when qk_norm (Qwen3)"),
)
ATTENTION_INPUTS = {
    "x": "[1, hidden_size, 1, seq_len] fp16",
    "k_cache": "[1, num_key_value_heads, cache_len, head_dim] fp16 (decode)",
    "v_cache": "[1, num_key_value_heads, cache_len, head_dim] fp16 (decode)",
    "length": "[1] int32: valid cache rows (decode)",
    "cos": "[1, 1, head_dim, seq_len] fp16 (decode)",
    "sin": "[1, 1, head_dim, seq_len] fp16 (decode)",
}
ATTENTION_OUTPUTS = {
    "y": "[1, hidden_size, 1, seq_len] fp16",
    "k": "[1, num_key_value_heads, seq_len, head_dim] fp16",
    "v": "[1, num_key_value_heads, seq_len, head_dim] fp16",
}
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}


def param_space(d: Draw) -> dict[str, Any]:
    return fields_of(AttentionOpParams, config_space(d))


OP = CatalogOp(
    name="attention",
    summary="Llama attention block: RMSNorm, QKV, RoPE, causal GQA, O projection, residual; "
    "prefill or decode over a KV cache",
    params=AttentionOpParams,
    build=build,
    definition=definition,
    # fp16 projections, rotations, scores, probabilities and context: the block sweep's worst
    # (python -m app.reference.sweep_blocks 200; |x| to 1000, peaks of 60000) is 1.7e-3
    tolerance=5e-3,
    examples=(
        {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "seq_len": 4},
        {
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "seq_len": 2,
            "mode": "decode",
            "cache_len": 6,
        },
        {
            "hidden_size": 24,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "seq_len": 3,
            "attention_bias": True,
            "o_proj_bias": False,
            "rope_scaling": LLAMA3_SCALING,
            "position_offset": 40,
            "rope_theta": 500000.0,
        },
        {
            "hidden_size": 16,
            "num_attention_heads": 2,
            "head_dim": 6,
            "seq_len": 1,
            "mode": "decode",
            "cache_len": 3,
            "attention_bias": True,
        },
        {
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "seq_len": 2,
            "mode": "decode",
            "cache_len": 8,
            "kv_cache": "state",
        },
    ),
    param_space=param_space,
    verification_inputs=decode_inputs,
    weights=attention_weights,
    weight_docs=ATTENTION_WEIGHT_DOCS,
    inputs=ATTENTION_INPUTS,
    outputs=ATTENTION_OUTPUTS,
)
