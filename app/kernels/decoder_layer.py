"""decoder_layer: one Llama-family decoder layer from a checkpoint's tensors, in one program:
the attention block (app/kernels/attention.py) then the gated MLP block (app/kernels/ffn.py),
each behind its own RMSNorm and residual, as Hugging Face's LlamaDecoderLayer computes them.

Inputs and outputs are the attention op's: prefill or decode, `y` plus the new `k` and `v`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.kernels.attention import (
    ATTENTION_INPUTS,
    ATTENTION_OUTPUTS,
    ATTENTION_WEIGHT_DOCS,
    LLAMA3_SCALING,
)
from app.kernels.ffn import MLP_WEIGHT_DOCS
from app.kernels.op import Arrays, CatalogOp
from app.kernels.space import Draw
from app.kernels.transformer_params import DecoderParams, config_space, decoder_weights, fields_of
from app.kernels.transformer_program import attention, context, decode_inputs, mlp, prefixed
from app.kernels.transformer_reference import (
    ane,
    cache_layout,
    reference_context,
    states_after,
)
from app.kernels.transformer_reference import attention as attention_f64
from app.kernels.transformer_reference import mlp as mlp_f64
from app.mil import Builder


class DecoderLayerParams(DecoderParams):
    """A Llama decoder layer: attention (RMSNorm, QKV, RoPE, GQA) and the gated MLP."""


def build(b: Builder, p: DecoderLayerParams, w: dict[str, np.ndarray]):
    ctx = context(b, p)
    h, k, v = attention(
        b,
        p,
        ctx.x,
        w,
        "",
        prefixed("attn_"),
        ctx.rope,
        ctx.mask,
        ctx.pasts[0],
        ("attn_out", "k", "v"),
    )
    return [mlp(b, p, h, w, "", prefixed("mlp_"), "y"), k, v]


def definition(p: DecoderLayerParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """Hugging Face's LlamaDecoderLayer: h = x + attn(norm(x)); y = h + mlp(norm(h))."""
    x, cos, sin, pasts = reference_context(p, inputs, states=states)
    h, k, v = attention_f64(p, x, weights, "", cos, sin, pasts[0])
    y = mlp_f64(p, h, weights, "", norm=True, residual=True)
    after = states_after(p, states, inputs.get("length"), {"": (k, v)})
    return {"y": ane(y), "k": cache_layout(k), "v": cache_layout(v)}, after


def param_space(d: Draw) -> dict[str, Any]:
    return fields_of(DecoderLayerParams, config_space(d))


OP = CatalogOp(
    name="decoder_layer",
    summary="Llama decoder layer (attention + gated MLP) in one program; prefill or decode",
    params=DecoderLayerParams,
    build=build,
    definition=definition,
    # attention then the MLP on its output: the block sweep's worst (python -m
    # app.reference.sweep_blocks 200; |x| to 1000, peaks of 60000) is 2.6e-3
    tolerance=1e-2,
    examples=(
        {
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "seq_len": 4,
        },
        {
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "seq_len": 2,
            "mode": "decode",
            "cache_len": 5,
            "rope_scaling": LLAMA3_SCALING,
            "hidden_act": "gelu_tanh",
        },
    ),
    param_space=param_space,
    verification_inputs=decode_inputs,
    weights=decoder_weights,
    weight_docs=ATTENTION_WEIGHT_DOCS + MLP_WEIGHT_DOCS,
    inputs=ATTENTION_INPUTS,
    outputs=ATTENTION_OUTPUTS,
)
