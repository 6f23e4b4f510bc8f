"""A Hugging Face config.json -> the block ops' params, key for key.

The ops take the config's own names; what differs between configs is read here: the RoPE
settings (`rope_theta` + `rope_scaling`, or transformers 5's `rope_parameters`, whose type
`default` means no scaling), the activation's name (`gelu_pytorch_tanh` is `gelu_tanh`), Qwen2's
biases (on q, k, v, never on o: its config has no `attention_bias`), Qwen3's per-head q/k norms
(`qk_norm`), and a multimodal config's `text_config`. What the ops cannot compute is refused
naming the key: another RoPE type, MLP biases, sliding-window attention wider than nothing. Every
fault is a RequestError whose field is `config.<key>`.

A config is checked key by key before any of it is used (`check_config`), whether read from a
file (app/core/jsonfile.py: bounded, strict JSON) or given in a request body: every key the service
reads has its JSON type (strict: `"32"` is not an integer) and a range; other keys pass as they
are. The same holds for generation_config.json and a shard index (app/checkpoints/files.py).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.jsonfile import JsonLimits, read_json, validate
from app.errors import RequestError
from app.settings import Settings

# model_type -> the class name transformers gives its causal LM: the decoder-only families the
# kits build and the planner plans (other configs are planned when they spell the same keys)
CAUSAL_LMS = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}

# config key -> the op param it sets, when present (and not null)
DIRECT = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "attention_bias",
)
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "relu2": "relu2",
}
ROPE_SCALING_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)


# Far above any released model: a size past them is a typo or an attack, and would make the
# arithmetic of a plan or a kit needlessly large.
MAX_DIM = 1 << 24
MAX_LAYERS = 4096
MAX_POSITIONS = (1 << 31) - 1  # int32: every length a program takes
Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]
Positions = Annotated[int, Field(ge=1, le=MAX_POSITIONS)]
Positive = Annotated[float, Field(gt=0)]
# -1 stands for "none" in some configs (pad_token_id of Llama 2)
TokenId = Annotated[int, Field(ge=-1, le=MAX_DIM)]
TokenIds = TokenId | Annotated[list[TokenId], Field(max_length=64)]
Name = Annotated[str, Field(max_length=256)]


class RopeFile(BaseModel):
    """`rope_scaling` / `rope_parameters`: the keys read (app/checkpoints/config.py, _rope)."""

    model_config = ConfigDict(extra="allow")

    rope_type: Name | None = None
    type: Name | None = None
    rope_theta: Positive | None = None
    factor: Positive | None = None
    low_freq_factor: Positive | None = None
    high_freq_factor: Positive | None = None
    original_max_position_embeddings: Positions | None = None


class SpecialTokens(BaseModel):
    """The token ids a kit records (kit.json `special_tokens`)."""

    model_config = ConfigDict(extra="allow")

    bos_token_id: TokenIds | None = None
    eos_token_id: TokenIds | None = None
    pad_token_id: TokenIds | None = None


class ConfigFile(SpecialTokens):
    """config.json as the service reads it: each key it uses, typed and bounded."""

    model_type: Name | None = None
    architectures: Annotated[list[Name], Field(max_length=64)] | None = None
    hidden_size: Dim | None = None
    intermediate_size: Dim | None = None
    num_attention_heads: Dim | None = None
    num_key_value_heads: Dim | None = None
    head_dim: Dim | None = None
    num_hidden_layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] | None = None
    vocab_size: Dim | None = None
    max_position_embeddings: Positions | None = None
    rms_norm_eps: Annotated[float, Field(gt=0, lt=1)] | None = None
    rope_theta: Positive | None = None
    rope_scaling: RopeFile | None = None
    rope_parameters: RopeFile | None = None
    hidden_act: Name | None = None
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    tie_word_embeddings: bool | None = None
    sliding_window: Annotated[int, Field(ge=0, le=MAX_POSITIONS)] | None = None
    use_sliding_window: bool | None = None
    text_config: ConfigFile | None = None


def json_limits() -> JsonLimits:
    """The limits a JSON file a user hands in is read with (ANE_MAX_JSON_BYTES)."""
    return JsonLimits(Settings().max_json_bytes)


def check_config(config: Any, file: str = "config") -> dict[str, Any]:
    """`config` (a config.json's object), every key the service reads checked; refused naming
    `config.<key>` and `file`."""
    validate(config, ConfigFile, file, field="config")
    return config


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """A config.json file, bounded and checked (`check_config`)."""
    return check_config(read_json(path, str(path), json_limits(), "config"), str(path))


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config: multimodal configs nest it as `text_config`."""
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        return config["text_config"]
    return config


def params_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder params a config sets (the ops take the subset they need)."""
    config = text_config(config)
    params = {k: config[k] for k in DIRECT if config.get(k) is not None}
    for key in ("hidden_size", "num_attention_heads"):
        if key not in params:
            raise RequestError(f"config.{key}", "missing: the config must give it")
    if config.get("model_type") == "qwen2":  # q, k, v biases; the o projection has none
        params |= {"attention_bias": True, "o_proj_bias": False}
    if config.get("model_type") == "qwen3":  # every q and k head RMS-normed before RoPE
        params["qk_norm"] = True
    if config.get("mlp_bias"):
        raise RequestError("config.mlp_bias", "MLP projections with biases are not supported")
    act = config.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise RequestError(
            "config.hidden_act", f"{act!r} is not supported; one of {', '.join(ACTIVATIONS)}"
        )
    params["hidden_act"] = ACTIVATIONS[act]
    params |= _rope(config)
    return params


def _rope(config: dict[str, Any]) -> dict[str, Any]:
    """rope_theta and rope_scaling from either spelling."""
    key = "rope_parameters" if isinstance(config.get("rope_parameters"), dict) else "rope_scaling"
    rope = config.get(key) or {}
    if not isinstance(rope, dict):
        raise RequestError(f"config.{key}", "must be an object or null")
    theta = rope.get("rope_theta", config.get("rope_theta"))
    out: dict[str, Any] = {} if theta is None else {"rope_theta": theta}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return out
    if kind != "llama3":
        raise RequestError(
            f"config.{key}.rope_type", f"{kind!r} is not supported; RoPE types: default, llama3"
        )
    missing = [k for k in ROPE_SCALING_KEYS if k not in rope]
    if missing:
        raise RequestError(f"config.{key}.{missing[0]}", "missing for rope_type llama3")
    return out | {
        "rope_scaling": {"rope_type": "llama3", **{k: rope[k] for k in ROPE_SCALING_KEYS}}
    }


def check_window(config: dict[str, Any], span: int) -> None:
    """Refuse sliding-window attention when a program's keys span more than the window (within
    it, windowed and full attention are the same)."""
    config = text_config(config)
    window = config.get("sliding_window")
    active = config.get("use_sliding_window", config.get("model_type") in ("mistral", "mixtral"))
    if window and active and span > window:
        raise RequestError(
            "config.sliding_window",
            f"attention over {span} positions exceeds "
            f"the sliding window of {window}, which is not supported",
        )


def not_a_decoder(config: dict[str, Any], fault: RequestError | None = None) -> RequestError:
    """The refusal of a config that is not of a decoder-only family the planner knows, on its
    model_type: an encoder (BERT) or an encoder-decoder (Whisper) spells its keys otherwise, and
    blaming the first key that differs (`hidden_act`, `hidden_size`) misleads."""
    model_type = config.get("model_type")
    names = config.get("architectures") or []
    why = f" (its config says {fault.field}: {fault.message})" if fault is not None else ""
    return RequestError(
        "config.model_type",
        f"model_type {model_type!r} (architectures {names}) is not a decoder-only model of a "
        f"family planned here{why}; planned: {', '.join(CAUSAL_LMS)} and configs that "
        "spell their keys",
        title="Unsupported architecture",
    )
