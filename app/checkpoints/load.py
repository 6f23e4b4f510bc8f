"""A block op's params and weights from a checkpoint and its config: the tensors of the layer(s)
asked for, found under the checkpoint's own names, checked against the config's shapes before
any is read, then converted to fp16 one by one.

Checkpoints name a layer's tensors `<prefix>layers.<i>.<tensor>` (`model.` for most causal LMs,
`model.language_model.` and the like for multimodal ones); the prefix is found from the names.
The ops name their weights relative to the layer (decoder_stack: `layers.<i>.<tensor>`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.checkpoints.config import check_window, params_from_config, read_config, text_config
from app.checkpoints.convert import to_fp16
from app.checkpoints.files import Mapped, Tensor, open_checkpoint
from app.errors import RequestError
from app.kernels import get_op, parse_params
from app.kernels.transformer_params import TokenParams
from app.kernels.weight_check import WeightsOnRead

LAYER_TENSOR = re.compile(r"^(.*?)layers\.(\d+)\.(self_attn\.q_proj|mlp\.down_proj)\.weight$")
STACK = "decoder_stack"
# The block ops whose weights are a decoder layer's tensors under their Hugging Face names.
CHECKPOINT_OPS = ("ffn", "attention", "decoder_layer", STACK)


@dataclass(frozen=True)
class Loaded:
    """What a request needs from a checkpoint."""

    params: dict[str, Any]  # the op's params: the config's, then the call's
    weights: dict[str, np.ndarray]  # fp16, by the op's weight names
    sources: dict[str, str] = field(default_factory=dict)  # op weight name -> checkpoint tensor
    source_bytes: int = 0  # checkpoint bytes read


def layer_prefix(names) -> str:
    """What precedes `layers.<i>.` in the names of the decoder layers' tensors."""
    prefixes = sorted({m.group(1) for n in names if (m := LAYER_TENSOR.match(n))})
    if not prefixes:
        raise RequestError(
            "checkpoint",
            "no decoder layers in the checkpoint (no tensor named "
            "<prefix>layers.<i>.self_attn.q_proj.weight)",
        )
    if len(prefixes) > 1:
        raise RequestError(
            "checkpoint",
            f"decoder layers under several prefixes "
            f"({', '.join(repr(p) for p in prefixes)}): cannot tell which to use",
        )
    return prefixes[0]


def parse_layers(text: str | int, field: str = "layers") -> range:
    """`3` or `0-15` (inclusive) -> the range of layer indices."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(text))
    if match is None or (match.group(2) and int(match.group(2)) < int(match.group(1))):
        raise RequestError(field, f"{text!r} is not a layer (3) or an inclusive range (0-15)")
    first = int(match.group(1))
    return range(first, int(match.group(2) or first) + 1)


def op_params(op: str, config: Mapping[str, Any], layers: range, call: Mapping[str, Any]):
    """The op's params: the config keys it takes, its layer range (decoder_stack), the call's."""
    catalog_op = get_op(op)
    if op not in CHECKPOINT_OPS:
        raise RequestError(
            "checkpoint",
            f"{op} does not read checkpoints: a checkpoint goes with {', '.join(CHECKPOINT_OPS)}",
        )
    fields = catalog_op.params.model_fields
    params = {k: v for k, v in params_from_config(dict(config)).items() if k in fields}
    if op == STACK:
        params |= {"first_layer": layers.start, "num_layers": len(layers)}
    elif len(layers) != 1:
        raise RequestError("layers", f"{op} builds one layer; decoder_stack builds a range")
    params |= dict(call)
    parsed = parse_params(catalog_op, params)
    assert isinstance(parsed, TokenParams)  # every checkpoint op reads the residual stream
    span = getattr(parsed, "position_offset", 0) + getattr(parsed, "kv_len", parsed.seq_len)
    check_window(dict(config), span)
    return catalog_op, parsed, params


def locate(
    op: str, parsed, tensors: Mapping[str, Tensor], layer: int, prefix: str | None = None
) -> dict[str, Tensor]:
    """Each of the op's weights -> its checkpoint tensor, shapes checked against the config."""
    prefix = layer_prefix(tensors) if prefix is None else prefix
    found = {}
    for spec in get_op(op).weights(parsed):
        name = f"{prefix}{spec.name}" if op == STACK else f"{prefix}layers.{layer}.{spec.name}"
        tensor = tensors.get(name)
        if tensor is None:
            raise RequestError(
                "checkpoint",
                f"tensor {name!r} is missing (the config asks for {spec.expr})",
                title="Checkpoint and config disagree",
            )
        if tensor.shape != spec.shape and tensor.shape not in spec.also_accepts:
            expected = (spec.also_accepts or (spec.shape,))[0]
            raise RequestError(
                "checkpoint",
                f"tensor {name!r} has shape {list(tensor.shape)}; "
                f"the config gives {list(expected)} ({spec.expr})",
                title="Checkpoint and config disagree",
            )
        found[spec.name] = tensor
    return found


def convert_all(located: Mapping[str, Tensor]) -> tuple[dict[str, np.ndarray], int]:
    """Every located tensor in fp16, and the checkpoint bytes read; values beyond the fp16 range
    are refused with the count per tensor."""
    weights, overflow, read = {}, {}, 0
    with Mapped() as mapped:
        for name, tensor in located.items():
            converted = to_fp16(tensor, mapped)
            weights[name], read = converted.values, read + tensor.nbytes
            if converted.overflow:
                overflow[tensor.name] = converted.overflow
    if overflow:
        listed = ", ".join(f"{n}: {c}" for n, c in overflow.items())
        raise RequestError(
            "checkpoint",
            f"values beyond the fp16 range (±65504) would become infinite: {listed}",
            title="fp16 overflow",
            overflow=overflow,
        )
    return weights, read


class ConvertedOnRead(WeightsOnRead):
    """Located tensors converted to fp16 each time one is read (`convert_all` of that one), none
    held: a program whose weights are compressed as they are read holds one fp16 tensor at a
    time, not all of them."""

    def __init__(self, located: Mapping[str, Tensor]):
        self._located = dict(located)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._located[name].shape

    def __contains__(self, name: object) -> bool:
        return name in self._located

    def __getitem__(self, name: str) -> np.ndarray:
        weights, _ = convert_all({name: self._located[name]})
        return weights[name]

    def __iter__(self):
        return iter(self._located)

    def __len__(self) -> int:
        return len(self._located)


@dataclass(frozen=True)
class Resolved:
    """A checkpoint reference resolved: nothing read yet but the tensors' headers."""

    params: dict[str, Any]  # the op's params: the config's, then the call's
    located: dict[str, Tensor]  # the op's weight name -> the checkpoint tensor holding it


def resolve(
    op: str,
    tensors: Mapping[str, Tensor],
    config: Mapping[str, Any],
    layers: range,
    call: Mapping[str, Any] | None = None,
) -> Resolved:
    """The params of `op` for `layers` of a checkpoint and where each of its weights is, checked
    against the config: one path for files on disk (`load`) and uploaded blobs (HTTP)."""
    _, parsed, params = op_params(op, config, layers, call or {})
    count = text_config(dict(config)).get("num_hidden_layers")
    try:
        return Resolved(params, locate(op, parsed, tensors, layers.start))
    except RequestError as exc:
        if not (isinstance(count, int) and layers.stop > count):
            raise
        raise RequestError(
            "layers",
            f"{exc.message}: layer {layers.stop - 1} is out of range, "
            f"the model has {count} layers (0-{count - 1}, config.json "
            "num_hidden_layers)",
            title="Layer out of range",
        ) from None


def load(
    op: str,
    checkpoint: str | Path,
    config: str | Path | Mapping[str, Any],
    layers: range | int | str,
    call: Mapping[str, Any] | None = None,
) -> Loaded:
    """The params and fp16 weights of `op` for layer(s) `layers` of a checkpoint."""
    layers = layers if isinstance(layers, range) else parse_layers(layers)
    config = read_config(config) if isinstance(config, str | Path) else config
    resolved = resolve(op, open_checkpoint(checkpoint), config, layers, call)
    weights, read = convert_all(resolved.located)
    sources = {n: t.name for n, t in resolved.located.items()}
    return Loaded(resolved.params, weights, sources, read)
