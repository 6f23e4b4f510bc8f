"""A Hugging Face config.json -> the decoder's shape and the precision its weights will have.

Only the config is read, never the weights: the planner answers before a checkpoint is
downloaded. The keys the service's decoder ops need are checked by the same reader the builds
use (app.checkpoints.config: a missing or unsupported key is named as `config.<key>`); the shape
adds the layer count, the vocabulary and whether the head is tied to the embedding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.checkpoints.config import (
    CAUSAL_LMS,
    check_config,
    not_a_decoder,
    params_from_config,
    text_config,
)
from app.devices.llm import FP16, INT8, DecoderShape, Precision, palettized
from app.errors import RequestError
from app.language.targets import DEFAULT_TARGET
from app.quantize import (
    LinearConfig,
    PalettizeConfig,
    QuantizeConfigError,
    check_target,
    parse_config,
)

# Far above any released model: a size past it is a typo, and would make the plan's arithmetic
# (one entry per layer, one step per prefill chunk) needlessly large.
MAX_SIZE = {"num_hidden_layers": 4096}
MAX_ANY = 1 << 24


def _positive_int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise RequestError(f"config.{key}", "missing: the config must give it")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestError(f"config.{key}", f"must be a positive integer, not {value!r}")
    if value > (limit := MAX_SIZE.get(key, MAX_ANY)):
        raise RequestError(f"config.{key}", f"{value:,} is over the planner's limit of {limit:,}")
    return value


def shape_from_config(config: Mapping[str, Any]) -> DecoderShape:
    if not isinstance(config, Mapping):
        raise RequestError("config", "a config.json holds a JSON object")
    check_config(dict(config))  # every key read, typed and bounded, named when it is not
    if config.get("is_encoder_decoder"):
        raise not_a_decoder(dict(config))
    try:
        return _shape(config)
    except RequestError as exc:
        model_type = config.get("model_type")
        if (
            not (exc.field or "").startswith("config.")
            or model_type is None
            or model_type in CAUSAL_LMS
        ):
            raise
        raise not_a_decoder(dict(config), exc) from None


def _shape(config: Mapping[str, Any]) -> DecoderShape:
    try:
        params = params_from_config(dict(config))  # checks what the decoder ops need, by key
    except (TypeError, AttributeError) as exc:  # a value of the wrong JSON type
        raise RequestError("config", f"a key has a value of the wrong type: {exc}") from None
    text = text_config(dict(config))
    hidden = _positive_int(text, "hidden_size")
    heads = _positive_int(text, "num_attention_heads")
    head_dim = params.get("head_dim") or hidden // heads
    return DecoderShape(
        layers=_positive_int(text, "num_hidden_layers"),
        hidden=hidden,
        intermediate=_positive_int(text, "intermediate_size"),
        heads=heads,
        kv_heads=_positive_int(text, "num_key_value_heads", heads),
        head_dim=_positive_int({"head_dim": head_dim}, "head_dim"),
        vocab=_positive_int(text, "vocab_size"),
        # transformers' default is a tied head; Llama-2 and other untied models say so
        tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))),
    )


def precision_of(quantize: Mapping[str, Any] | None) -> Precision:
    """The stored precision of a `quantize` config (the service's own JSON form); the planner
    models fp16, int8 and palettized weights."""
    if quantize is None:
        return FP16
    try:
        parsed = parse_config(dict(quantize))
        check_target(parsed, DEFAULT_TARGET)  # the checks that need no weight shape
    except QuantizeConfigError as exc:
        raise RequestError(exc.field, exc.message) from None
    except (TypeError, AttributeError) as exc:
        raise RequestError("quantize", f"a key has a value of the wrong type: {exc}") from None
    if isinstance(parsed, PalettizeConfig):
        return palettized(parsed.nbits)
    if isinstance(parsed, LinearConfig) and parsed.dtype in ("int8", "uint8"):
        return INT8
    mode = parsed.dtype if isinstance(parsed, LinearConfig) else "prune"
    raise RequestError(
        "quantize.mode",
        f"{mode} weights are not modelled by the planner; it "
        "plans fp16, int8 (linear) and palettized weights",
    )
