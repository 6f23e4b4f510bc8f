"""A Hugging Face config.json -> the block ops' params, key for key.

The ops take the config's own names; what differs between configs is read here: the RoPE
settings (`rope_theta` + `rope_scaling`, or transformers 5's `rope_parameters`, whose type
`default` means no scaling), the activation's name (`gelu_pytorch_tanh` is `gelu_tanh`), Qwen2's
biases (on q, k, v, never on o: its config has no `attention_bias`), Qwen3's per-head q/k norms
(`qk_norm`), and a multimodal config's `text_config`. What the ops cannot compute is refused
naming the key: another RoPE type, MLP biases, sliding-window attention wider than nothing. Every
fault is a RequestError whose field is `config.<key>`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.errors import RequestError

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


def read_config(path: str | Path) -> dict[str, Any]:
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise RequestError("config", f"{path}: cannot read a config.json: {exc}") from None
    if not isinstance(config, dict):
        raise RequestError("config", f"{path}: a config.json holds a JSON object")
    return config


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
