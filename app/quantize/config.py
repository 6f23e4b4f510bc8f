"""Quantization configs, named as coremltools.optimize names them, and their validation.

    {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 16}
    {"mode": "linear", "dtype": "int8", "granularity": "per_block", "block_size": 32,
     "symmetric": true}
    {"mode": "prune", "target_sparsity": 0.5, "dtype": "int8"}

Defaults follow `OpPalettizerConfig` / `OpLinearQuantizerConfig` (granularity per_tensor resp.
per_channel, group/block size 32, symmetric). Every error is a `QuantizeConfigError` naming the
field at fault (`quantize.nbits`), raised before anything is computed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

from app.devices.llm import PALETTE_BITS
from app.language.targets import Target, get_target

# The iOS16 constexpr_lut_to_dense (ios17 programs) takes 2, 4, 16, 64 or 256 LUT entries.
PALETTE_BITS_IOS17 = (1, 2, 4, 6, 8)
LINEAR_DTYPES = ("int8", "uint8", "int4", "uint4")
PRUNE_DTYPES = ("int8",)


class QuantizeConfigError(ValueError):
    """A quantization config that cannot be applied; `field` is its path (`quantize.nbits`)."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class PalettizeConfig:
    """k-means look-up tables of 2^nbits fp16 entries: one for the tensor (`per_tensor`) or one per
    `group_size` output channels (`per_grouped_channel`, ios18)."""

    nbits: int
    granularity: str = "per_tensor"
    group_size: int = 32
    mode = "palettize"


@dataclass(frozen=True)
class LinearConfig:
    """Affine integers with a scale (and, unless symmetric signed, an offset) per output channel
    (`per_channel`), per `block_size` inputs of each channel (`per_block`, ios18) or per tensor."""

    dtype: str = "int8"
    granularity: str = "per_channel"
    block_size: int = 32
    symmetric: bool = True
    mode = "linear"


@dataclass(frozen=True)
class PruneConfig:
    """The `target_sparsity` fraction of weights with the smallest magnitude set to zero and
    stored as a bit mask; with `dtype` int8 the kept values are also quantized per channel
    (symmetric, ios18)."""

    target_sparsity: float
    dtype: str | None = None
    mode = "prune"


QuantizeConfig = PalettizeConfig | LinearConfig | PruneConfig
_MODES: dict[str, type[QuantizeConfig]] = {
    "palettize": PalettizeConfig,
    "linear": LinearConfig,
    "prune": PruneConfig,
}
_TYPES: dict[str, tuple[type, ...]] = {
    "nbits": (int,),
    "group_size": (int,),
    "block_size": (int,),
    "granularity": (str,),
    "dtype": (str, type(None)),
    "symmetric": (bool,),
    "target_sparsity": (int, float),
}


def parse_config(data: Mapping[str, Any], field: str = "quantize") -> QuantizeConfig:
    """A config from its JSON form; names the field of the first problem found."""
    if not isinstance(data, Mapping):
        raise QuantizeConfigError(field, "must be an object with a mode")
    mode = data.get("mode")
    if mode not in _MODES:
        raise QuantizeConfigError(f"{field}.mode", f"must be one of {', '.join(_MODES)}")
    cls = _MODES[mode]
    known = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}  # each checked against its field's type below
    for key, value in data.items():
        if key == "mode":
            continue
        if key not in known:
            raise QuantizeConfigError(
                f"{field}.{key}", f"unknown for mode {mode}; expected {', '.join(sorted(known))}"
            )
        # bool is an int in Python: refuse true where a number is meant, and numbers for bools
        if not isinstance(value, _TYPES[key]) or (isinstance(value, bool) and key != "symmetric"):
            raise QuantizeConfigError(f"{field}.{key}", f"{value!r} has the wrong type")
        values[key] = value
    try:
        return cls(**values)
    except TypeError:
        missing = sorted(
            f.name for f in fields(cls) if f.name not in values and f.default is MISSING
        )
        raise QuantizeConfigError(f"{field}.{missing[0]}", "is required") from None


def check_config(
    config: QuantizeConfig,
    shape: Sequence[int],
    target: str | Target,
    *,
    channel_axis: int = 0,
    input_axis: int = 1,
    field: str = "quantize",
) -> None:
    """Raise `QuantizeConfigError` unless `config` applies to a weight of `shape` on `target`.
    `channel_axis` holds the output channels (groups, per-channel scales), `input_axis` the
    inputs of each channel (blocks)."""
    check_target(config, target, field)
    if len(shape) < 2 or math.prod(shape) < 1:
        raise QuantizeConfigError(field, f"needs a weight of rank 2 or more, got {list(shape)}")
    if isinstance(config, PalettizeConfig) and config.granularity == "per_grouped_channel":
        channels = shape[channel_axis]
        if channels % config.group_size:
            raise QuantizeConfigError(
                f"{field}.group_size", f"{config.group_size} does not divide {channels} channels"
            )
    if isinstance(config, LinearConfig) and config.granularity == "per_block":
        inputs = shape[input_axis]
        if inputs % config.block_size:
            raise QuantizeConfigError(
                f"{field}.block_size",
                f"{config.block_size} does not divide the input dimension {inputs}",
            )


def check_target(config: QuantizeConfig, target: str | Target, field: str = "quantize") -> None:
    """Raise `QuantizeConfigError` unless `config` is valid on `target` for some weight: the
    checks that need no shape (the ANE preflight reads configs this way)."""
    tgt = get_target(target)
    if isinstance(config, PalettizeConfig):
        _check_palettize(config, tgt, field)
    elif isinstance(config, LinearConfig):
        _check_linear(config, tgt, field)
    else:
        _check_prune(config, tgt, field)


def _one_of(value, allowed: Sequence, where: str) -> None:
    if value not in allowed:
        raise QuantizeConfigError(where, f"{value!r} is not one of {', '.join(map(str, allowed))}")


def _positive(value: int, where: str) -> None:
    if value < 1:
        raise QuantizeConfigError(where, f"must be a positive integer, not {value}")


def _check_palettize(config: PalettizeConfig, target: Target, field: str) -> None:
    _one_of(config.nbits, PALETTE_BITS, f"{field}.nbits")
    _one_of(config.granularity, ("per_tensor", "per_grouped_channel"), f"{field}.granularity")
    if not target.ios18_compression and config.nbits not in PALETTE_BITS_IOS17:
        raise QuantizeConfigError(
            f"{field}.nbits", "3-bit palettes need ios18 (ios17 takes 1, 2, 4, 6 or 8 bits)"
        )
    if config.granularity == "per_grouped_channel":
        if not target.ios18_compression:
            raise QuantizeConfigError(f"{field}.granularity", "per_grouped_channel needs ios18")
        _positive(config.group_size, f"{field}.group_size")


def _check_linear(config: LinearConfig, target: Target, field: str) -> None:
    _one_of(config.dtype, LINEAR_DTYPES, f"{field}.dtype")
    _one_of(config.granularity, ("per_tensor", "per_channel", "per_block"), f"{field}.granularity")
    if not target.ios18_compression and config.dtype in ("int4", "uint4"):
        raise QuantizeConfigError(f"{field}.dtype", f"{config.dtype} needs ios18")
    if config.granularity == "per_block":
        if not target.ios18_compression:
            raise QuantizeConfigError(f"{field}.granularity", "per_block needs ios18")
        _positive(config.block_size, f"{field}.block_size")


def _check_prune(config: PruneConfig, target: Target, field: str) -> None:
    if not 0 < config.target_sparsity < 1:
        raise QuantizeConfigError(
            f"{field}.target_sparsity", f"{config.target_sparsity} is not in (0, 1)"
        )
    if config.dtype is not None:
        _one_of(config.dtype, PRUNE_DTYPES, f"{field}.dtype")
        if not target.ios18_compression:
            raise QuantizeConfigError(
                f"{field}.dtype", "pruned and quantized weights need ios18 (chained constexpr ops)"
            )


def config_json(config: QuantizeConfig) -> dict[str, Any]:
    """The config as data with every default filled in: two spellings of one config are equal."""
    return {"mode": config.mode, **{f.name: getattr(config, f.name) for f in fields(config)}}
