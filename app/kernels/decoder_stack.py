"""decoder_stack: decoder layers first_layer .. first_layer + num_layers − 1 of a checkpoint in ONE
program, or, with `split`, in a chain of programs each within the per-program weight budget.

Each layer is the decoder_layer op's program (app/kernels/decoder_layer.py), its ops named
`layer<i>_…`, its weights `layers.<i>.<tensor>` (the checkpoint's names after the model's own
prefix, `model.`), the layers reading one another's residual stream. The RoPE tables (prefill)
or the `length`/`cos`/`sin` inputs and the cache mask (decode) are shared by all layers. Outputs:
`y`, and per layer `k_<i>`, `v_<i>`; decode takes per layer `k_cache_<i>`, `v_cache_<i>`.

Split (`split: true`, when the weights exceed the budget): the layers are cut greedily in order,
each program as many layers as fit; program k reads `x` from program k − 1's `y` and everything
else from the stack's own inputs (chain.json records it). A layer whose weights alone exceed the
budget cannot be cut.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field, model_validator

from app.errors import RequestError
from app.kernels.attention import ATTENTION_WEIGHT_DOCS, LLAMA3_SCALING
from app.kernels.ffn import MLP_WEIGHT_DOCS
from app.kernels.op import Arrays, CatalogOp, WeightDoc
from app.kernels.space import Draw
from app.kernels.transformer_params import (
    MAX_POSITION,
    DecoderParams,
    config_space,
    decoder_weights,
    fields_of,
)
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
from app.settings import PROGRAM_WEIGHT_BUDGET_SETTING

MAX_LAYERS = 256


class DecoderStackParams(DecoderParams):
    """Decoder layers first_layer .. first_layer + num_layers − 1 in one program (or a chain)."""

    first_layer: int = Field(0, ge=0, le=MAX_POSITION, description="the checkpoint's layer index")
    num_layers: int = Field(ge=1, le=MAX_LAYERS)
    split: bool = Field(
        False,
        description="cut a stack whose weights exceed the program budget into a chain of "
        "programs, layer boundaries only",
    )

    @model_validator(mode="after")
    def _state_is_per_program(self) -> DecoderStackParams:
        if self.stateful and self.split:
            raise ValueError("a split stack keeps its caches as inputs (kv_cache: inputs)")
        return self

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.first_layer + self.num_layers)


def weights(p: DecoderStackParams):
    return [spec for i in p.layers for spec in decoder_weights(p, f"layers.{i}.")]


def build(b: Builder, p: DecoderStackParams, w: dict[str, np.ndarray]):
    ctx = context(b, p, tuple(f"_{i}" for i in p.layers))
    x, caches = ctx.x, []
    for i, past in zip(p.layers, ctx.pasts, strict=True):
        prefix = f"layers.{i}."
        h, k, v = attention(
            b,
            p,
            x,
            w,
            prefix,
            prefixed(f"layer{i}_attn_"),
            ctx.rope,
            ctx.mask,
            past,
            (f"layer{i}_attn_out", f"k_{i}", f"v_{i}"),
        )
        last = i == p.layers[-1]
        x = mlp(b, p, h, w, prefix, prefixed(f"layer{i}_mlp_"), "y" if last else f"layer{i}_out")
        caches += [k, v]
    return [x, *caches]


def definition(p: DecoderStackParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """Hugging Face's decoder layers applied in turn (LlamaModel's loop over its layers)."""
    x, cos, sin, pasts = reference_context(p, inputs, tuple(f"_{i}" for i in p.layers), states)
    out, new = {}, {}
    for i, past in zip(p.layers, pasts, strict=True):
        h, k, v = attention_f64(p, x, weights, f"layers.{i}.", cos, sin, past)
        x = mlp_f64(p, h, weights, f"layers.{i}.", norm=True, residual=True)
        out[f"k_{i}"], out[f"v_{i}"] = cache_layout(k), cache_layout(v)
        new[f"_{i}"] = (k, v)
    return {"y": ane(x), **out}, states_after(p, states, inputs.get("length"), new)


def layer_bytes(p: DecoderStackParams) -> int:
    """fp16 weight bytes of one layer."""
    return sum(2 * int(np.prod(s.shape)) for s in decoder_weights(p))


def parts(p: DecoderStackParams, budget: int) -> list[DecoderStackParams]:
    """The stack cut into runs of layers, each run's weights within `budget` bytes."""
    size = layer_bytes(p)
    if size > budget:
        raise RequestError(
            "split",
            f"one layer holds {size} bytes of weights, over the budget of {budget} bytes per "
            f"program ({PROGRAM_WEIGHT_BUDGET_SETTING}): no cut at layer boundaries brings it "
            f"within; raise {PROGRAM_WEIGHT_BUDGET_SETTING} to at least {size}, or quantize",
            title="Program too large",
            limit=budget,
        )
    per = budget // size
    starts = range(p.first_layer, p.first_layer + p.num_layers, per)
    last = p.first_layer + p.num_layers
    return [
        p.model_copy(update={"first_layer": s, "num_layers": min(per, last - s), "split": False})
        for s in starts
    ]


def param_space(d: Draw) -> dict[str, Any]:
    config = fields_of(DecoderStackParams, config_space(d))
    return {**config, "first_layer": d.integer(0, 30), "num_layers": d.integer(1, 3)}


OP = CatalogOp(
    name="decoder_stack",
    summary="decoder layers i..j in one program (or a chain within the weight budget); "
    "prefill or decode",
    params=DecoderStackParams,
    build=build,
    definition=definition,
    # the decoder layer's bound; errors do not compound across layers here, because each layer
    # adds its update to the residual stream, which carries the input through unchanged (the
    # tests measure two- and three-layer stacks)
    tolerance=1e-2,
    examples=(
        {
            "hidden_size": 16,
            "intermediate_size": 24,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "seq_len": 4,
            "first_layer": 1,
            "num_layers": 2,
        },
        {
            "hidden_size": 16,
            "intermediate_size": 24,
            "num_attention_heads": 2,
            "seq_len": 2,
            "mode": "decode",
            "cache_len": 4,
            "num_layers": 2,
            "rope_scaling": LLAMA3_SCALING,
        },
    ),
    param_space=param_space,
    verification_inputs=decode_inputs,
    weights=weights,
    weight_docs=tuple(
        WeightDoc(f"layers.<i>.{d.name}", d.shape, d.required)
        for d in ATTENTION_WEIGHT_DOCS + MLP_WEIGHT_DOCS
    ),
    parts=parts,
    inputs={
        "x": "[1, hidden_size, 1, seq_len] fp16",
        "k_cache_<i>": "[1, num_key_value_heads, cache_len, head_dim] fp16 per layer (decode)",
        "v_cache_<i>": "[1, num_key_value_heads, cache_len, head_dim] fp16 per layer (decode)",
        "length": "[1] int32: valid cache rows (decode)",
        "cos": "[1, 1, head_dim, seq_len] fp16 (decode)",
        "sin": "[1, 1, head_dim, seq_len] fp16 (decode)",
    },
    outputs={
        "y": "[1, hidden_size, 1, seq_len] fp16",
        "k_<i>": "[1, num_key_value_heads, seq_len, head_dim] fp16 per layer",
        "v_<i>": "[1, num_key_value_heads, seq_len, head_dim] fp16 per layer",
    },
)
