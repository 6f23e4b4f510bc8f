"""ffn: the gated MLP of a Llama-family layer from a checkpoint's tensors,
y = x + down(act(gate(h)) · up(h)), h = RMSNorm(x)·w.

act is SiLU (Llama), GELU with the tanh approximation (config hidden_act `gelu_pytorch_tanh`) or
ReLU²; the pre-RMSNorm (`post_attention_layernorm.weight`, the norm in front of the MLP in a
decoder layer) and the residual can each be left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from app.kernels.common import FP16, bind_ane_input
from app.kernels.op import Arrays, CatalogOp, WeightDoc
from app.kernels.space import Draw
from app.kernels.transformer_params import MLPParams, config_space, fields_of, mlp_weights
from app.kernels.transformer_program import mlp, prefixed
from app.kernels.transformer_reference import ane, tokens
from app.kernels.transformer_reference import mlp as mlp_f64
from app.mil import Builder


class FFNParams(MLPParams):
    """A gated MLP, down(act(gate(x)) · up(x)), with optional pre-RMSNorm and residual."""

    norm: bool = Field(True, description="RMSNorm the input first (post_attention_layernorm)")
    residual: bool = Field(True, description="add the input to the output")


def weights(p: FFNParams):
    return mlp_weights(p, norm=p.norm)


def build(b: Builder, p: FFNParams, w: dict[str, np.ndarray]):
    x = b.input("x", FP16, (1, p.hidden_size, 1, p.seq_len))
    return [mlp(b, p, x, w, "", prefixed("mlp_"), "y", norm=p.norm, residual=p.residual)]


def definition(p: FFNParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """Hugging Face's LlamaMLP, after the layer's post-attention RMSNorm, plus the residual."""
    y = mlp_f64(p, tokens(inputs["x"]), weights, "", p.norm, p.residual)
    return {"y": ane(y)}, {}


MLP_WEIGHT_DOCS = (
    WeightDoc("post_attention_layernorm.weight", "[hidden_size]", "when norm is true"),
    WeightDoc("mlp.gate_proj.weight", "[intermediate_size, hidden_size]"),
    WeightDoc("mlp.up_proj.weight", "[intermediate_size, hidden_size]"),
    WeightDoc("mlp.down_proj.weight", "[hidden_size, intermediate_size]"),
)


def param_space(d: Draw) -> dict[str, Any]:
    config = fields_of(FFNParams, config_space(d))
    return {**config, "norm": d.boolean(), "residual": d.boolean()}


OP = CatalogOp(
    name="ffn",
    summary="gated MLP down(act(gate(x))·up(x)) with RMSNorm and residual (SiLU, GELU-tanh, ReLU²)",
    params=FFNParams,
    build=build,
    definition=definition,
    # RMSNorm, three fp16 projections, the activation and the product: the block sweep's worst
    # (python -m app.reference.sweep_blocks 200; |x| to 1000, peaks of 60000) is 2.4e-3
    tolerance=8e-3,
    examples=(
        {"hidden_size": 16, "intermediate_size": 32, "seq_len": 4},
        {
            "hidden_size": 16,
            "intermediate_size": 24,
            "seq_len": 3,
            "hidden_act": "gelu_tanh",
            "norm": False,
        },
        {
            "hidden_size": 8,
            "intermediate_size": 16,
            "seq_len": 2,
            "hidden_act": "relu2",
            "residual": False,
        },
    ),
    param_space=param_space,
    weights=weights,
    weight_docs=MLP_WEIGHT_DOCS,
    inputs={"x": "[1, hidden_size, 1, seq_len] fp16"},
    outputs={"y": "[1, hidden_size, 1, seq_len] fp16"},
    bind=bind_ane_input("hidden_size", "seq_len", io_dtype=False),
)
