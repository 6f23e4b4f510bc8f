"""Parameters and weights shared by the transformer-block ops (ffn, attention, decoder_layer,
decoder_stack), under the names Hugging Face configs give them.

A Llama-family config.json maps onto these models key for key (`hidden_size`,
`num_attention_heads`, `num_key_value_heads`, `head_dim`, `intermediate_size`, `rms_norm_eps`,
`rope_theta`, `rope_scaling`, `attention_bias`, `hidden_act`); what a program adds (`mode`,
`seq_len`, `position_offset`, `cache_len`, `kv_cache`) sits beside them. Weights are named as the
checkpoint names them, relative to the layer (`self_attn.q_proj.weight`), in the checkpoint's
[out, in] layout (the program's [out, in, 1, 1] is accepted too).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from app.kernels.common import FP16
from app.kernels.op import WeightSpec
from app.kernels.params import Dim, OpParams
from app.kernels.rope import Llama3RopeScaling
from app.kernels.space import Draw

# Positions a program may be built for: the largest axis the ANE is reported to take.
MAX_POSITION = 1 << 16
Activation = Literal["silu", "gelu_tanh", "relu2"]


class TokenParams(OpParams):
    """What every block reads: the residual stream [1, hidden_size, 1, seq_len]."""

    hidden_size: Dim
    seq_len: Dim = Field(description="tokens per call: S for prefill, T new tokens for decode")
    rms_norm_eps: float = Field(1e-6, gt=0, le=1)


class MLPParams(TokenParams):
    intermediate_size: Dim
    hidden_act: Activation = Field(
        "silu",
        description="silu (Llama), gelu_tanh (config hidden_act gelu_pytorch_tanh), relu2",
    )


class AttentionParams(TokenParams):
    """Pre-RMSNorm, Q/K/V projections, RoPE, causal GQA attention, O projection, residual."""

    head_dim: Dim | None = Field(None, description="default hidden_size / num_attention_heads")
    num_attention_heads: Dim
    num_key_value_heads: Dim | None = Field(None, description="default num_attention_heads")
    rope_theta: float = Field(10000.0, gt=0)
    rope_scaling: Llama3RopeScaling | None = None
    attention_bias: bool = Field(
        False, description="biases on the q, k, v projections (and on o, see o_proj_bias)"
    )
    o_proj_bias: bool | None = Field(
        None, description="bias on the o projection; default attention_bias (Qwen2: false)"
    )
    qk_norm: bool = Field(
        False,
        description="Qwen3: an RMSNorm over head_dim on every query and key head before RoPE "
        "(self_attn.q_norm.weight, self_attn.k_norm.weight)",
    )
    mode: Literal["prefill", "decode"] = Field(
        "prefill",
        description="prefill: seq_len tokens at position_offset.., attending to each other; "
        "decode: seq_len new tokens attending over a KV cache of cache_len positions",
    )
    position_offset: int = Field(0, ge=0, le=MAX_POSITION, description="prefill: first position")
    cache_len: Dim | None = Field(None, description="decode: positions the KV cache holds")
    kv_cache: Literal["inputs", "state"] = Field(
        "inputs",
        description="decode: the cache as inputs (new K/V rows are outputs), or as ios18 states "
        "updated in place",
    )

    @field_validator("num_attention_heads")
    @classmethod
    def _heads_divide_hidden(cls, heads: int, info: ValidationInfo) -> int:
        hidden, head_dim = info.data.get("hidden_size"), info.data.get("head_dim")
        if head_dim is None and hidden is not None and hidden % heads:
            raise ValueError(
                f"{heads} heads do not divide hidden_size {hidden} (give head_dim explicitly)"
            )
        return heads

    @field_validator("num_key_value_heads")
    @classmethod
    def _kv_heads_divide_heads(cls, kv_heads: int | None, info: ValidationInfo) -> int | None:
        heads = info.data.get("num_attention_heads")
        if kv_heads is not None and heads is not None and heads % kv_heads:
            raise ValueError(
                f"{kv_heads} key/value heads do not divide num_attention_heads {heads}"
            )
        return kv_heads

    @model_validator(mode="after")
    def _consistent(self) -> AttentionParams:
        if self.dim % 2:
            raise ValueError(f"head_dim {self.dim} must be even: RoPE rotates pairs")
        if self.mode == "decode":
            if self.cache_len is None:
                raise ValueError("mode decode needs cache_len (positions the KV cache holds)")
            if self.position_offset:
                raise ValueError("position_offset is for prefill; decode takes cos/sin inputs")
            if self.kv_cache == "state" and self.cache_len < self.seq_len:
                raise ValueError("a cache in states must hold the new rows: cache_len >= seq_len")
        else:
            if self.cache_len is not None or self.kv_cache != "inputs":
                raise ValueError("cache_len and kv_cache are for mode decode")
            if self.position_offset + self.seq_len > MAX_POSITION:
                raise ValueError(f"positions beyond {MAX_POSITION}")
        return self

    # -- what follows from the config --------------------------------------------------------
    @property
    def heads(self) -> int:
        return self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim(self) -> int:
        """head_dim, given or derived."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def has_o_bias(self) -> bool:
        return self.attention_bias if self.o_proj_bias is None else self.o_proj_bias

    @property
    def kv_len(self) -> int:
        """Keys each query may see: the prefill's own tokens, or the cache plus the new ones."""
        return self.seq_len if self.mode == "prefill" else (self.cache_len or 0) + self.seq_len

    @property
    def stateful(self) -> bool:
        return self.mode == "decode" and self.kv_cache == "state"


class DecoderParams(AttentionParams, MLPParams):
    """A decoder layer's config: attention then the gated MLP, each with its own RMSNorm."""


# -- weights --------------------------------------------------------------------------------------


def _matrix(name: str, out: int, inp: int, expr: str) -> WeightSpec:
    return WeightSpec(
        name,
        (out, inp, 1, 1),
        expr,
        FP16,
        also_accepts=((out, inp),),
        init_scale=inp**-0.5,
        quantizable=True,
    )


def _vector(name: str, size: int, expr: str, norm: bool = False) -> WeightSpec:
    if norm:  # RMSNorm gains: around 1; [1, C, 1, 1] broadcasts where a rank-1 const would not
        return WeightSpec(
            name,
            (1, size, 1, 1),
            expr,
            FP16,
            also_accepts=((size,),),
            init_scale=0.1,
            init_offset=1.0,
        )
    return WeightSpec(name, (size,), expr, FP16, init_scale=0.1)


def attention_weights(p: AttentionParams, prefix: str = "") -> list[WeightSpec]:
    h, q, kv = p.hidden_size, p.heads * p.dim, p.kv_heads * p.dim
    a = f"{prefix}self_attn."
    specs = [
        _vector(f"{prefix}input_layernorm.weight", h, "[hidden_size]", norm=True),
        _matrix(f"{a}q_proj.weight", q, h, "[num_attention_heads·head_dim, hidden_size]"),
        _matrix(f"{a}k_proj.weight", kv, h, "[num_key_value_heads·head_dim, hidden_size]"),
        _matrix(f"{a}v_proj.weight", kv, h, "[num_key_value_heads·head_dim, hidden_size]"),
        _matrix(f"{a}o_proj.weight", h, q, "[hidden_size, num_attention_heads·head_dim]"),
    ]
    if p.attention_bias:
        specs += [
            _vector(f"{a}q_proj.bias", q, "[num_attention_heads·head_dim]"),
            _vector(f"{a}k_proj.bias", kv, "[num_key_value_heads·head_dim]"),
            _vector(f"{a}v_proj.bias", kv, "[num_key_value_heads·head_dim]"),
        ]
    if p.has_o_bias:
        specs.append(_vector(f"{a}o_proj.bias", h, "[hidden_size]"))
    if p.qk_norm:  # gains [1, 1, head_dim, 1]: they broadcast over the heads [1, heads, d, S]
        specs += [
            WeightSpec(
                f"{a}{n}_norm.weight",
                (1, 1, p.dim, 1),
                "[head_dim]",
                FP16,
                also_accepts=((p.dim,),),
                init_scale=0.1,
                init_offset=1.0,
            )
            for n in ("q", "k")
        ]
    return specs


def mlp_weights(p: MLPParams, prefix: str = "", norm: bool = True) -> list[WeightSpec]:
    h, i = p.hidden_size, p.intermediate_size
    m = f"{prefix}mlp."
    specs = [
        _matrix(f"{m}gate_proj.weight", i, h, "[intermediate_size, hidden_size]"),
        _matrix(f"{m}up_proj.weight", i, h, "[intermediate_size, hidden_size]"),
        _matrix(f"{m}down_proj.weight", h, i, "[hidden_size, intermediate_size]"),
    ]
    if norm:
        specs.insert(
            0, _vector(f"{prefix}post_attention_layernorm.weight", h, "[hidden_size]", norm=True)
        )
    return specs


def decoder_weights(p: DecoderParams, prefix: str = "") -> list[WeightSpec]:
    return attention_weights(p, prefix) + mlp_weights(p, prefix)


# -- the blocks' sample space ---------------------------------------------------------------
SWEPT_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def config_space(d: Draw) -> dict[str, Any]:
    """A small Llama-family config with a prefill or a decode call: what every block op's
    `param_space` draws from (`fields_of` keeps an op's own), and what app/reference/sweep_blocks
    runs the three blocks on together. GQA groups of 1 to 4, biases one time in four, llama3
    RoPE scaling one in five, decode every other draw."""
    kv_heads = d.choice((1, 2, 4))
    heads = kv_heads * d.choice((1, 2, 3, 4))
    head_dim = d.dim_choice((8, 16, 32, 64))
    config: dict[str, Any] = {
        "hidden_size": heads * head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": d.dim(511, low=16),
        "hidden_act": d.cycle(("silu", "gelu_tanh", "relu2")),
        "rms_norm_eps": d.log_uniform(1e-6, 1e-4),
        "rope_theta": d.choice((10000.0, 500000.0)),
        "attention_bias": d.cycle((False, True, False, False)),
        "seq_len": d.integer(1, 32),
    }
    if d.cycle((False, False, True, False, False)):
        config["rope_scaling"] = SWEPT_SCALING
    if d.cycle((False, True)):
        config.update(mode="decode", seq_len=d.integer(1, 4), cache_len=d.integer(1, 64))
    else:
        config["position_offset"] = d.integer(0, 199)
    return config


def fields_of(params: type[OpParams], config: dict[str, Any]) -> dict[str, Any]:
    """The config keys an op's params take."""
    return {k: v for k, v in config.items() if k in params.model_fields}
