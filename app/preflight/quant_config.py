"""A quantization config (app/quantize reads and checks it) reduced to the format the report
table matches on: the mode, its bits or dtype, its granularity and the constexpr op it lowers to
on its target (palettize -> constexpr_lut_to_dense; linear -> constexpr_affine_dequantize on
ios17, constexpr_blockwise_shift_scale on ios18; prune -> constexpr_sparse_to_dense).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.language.targets import DEFAULT_TARGET, TARGETS
from app.quantize import (
    LinearConfig,
    PalettizeConfig,
    PruneConfig,
    QuantizeConfig,
    QuantizeConfigError,
    check_target,
    parse_config,
)

QUANTIZE_CONFIGS = (PalettizeConfig, LinearConfig, PruneConfig)


@dataclass(frozen=True)
class QuantFormat:
    """A config reduced to what the reports distinguish."""

    mode: str  # palettize | linear | prune
    nbits: int | None  # palette index bits
    dtype: str | None  # linear dtype, or the dtype of a pruned weight's kept values
    granularity: str | None
    group_size: int | None  # palettize per_grouped_channel
    block_size: int | None  # linear per_block
    op: str  # the constexpr op the config lowers to on its target

    def describe(self) -> str:
        if self.mode == "palettize":
            grouping = (
                f" per_grouped_channel (group_size {self.group_size})"
                if self.granularity == "per_grouped_channel"
                else ""
            )
            return f"palettize {self.nbits}-bit{grouping}"
        if self.mode == "linear":
            block = f" (block_size {self.block_size})" if self.block_size else ""
            return f"linear {self.dtype} {self.granularity}{block}"
        return "prune" + (f" + {self.dtype}" if self.dtype else "")


def read_config(
    config: Mapping[str, Any] | QuantizeConfig, target: str = DEFAULT_TARGET
) -> QuantFormat:
    """The format of a config (its JSON form is read by app.quantize, which names the key at
    fault in a QuantizeConfigError); checked against `target`."""
    if target not in TARGETS:
        raise QuantizeConfigError("target", f"{target!r} is not one of {', '.join(TARGETS)}")
    parsed = config if isinstance(config, QUANTIZE_CONFIGS) else parse_config(config)
    check_target(parsed, target)
    if isinstance(parsed, PalettizeConfig):
        group = parsed.group_size if parsed.granularity == "per_grouped_channel" else None
        return QuantFormat(
            "palettize",
            parsed.nbits,
            None,
            parsed.granularity,
            group,
            None,
            "constexpr_lut_to_dense",
        )
    if isinstance(parsed, LinearConfig):
        block = parsed.block_size if parsed.granularity == "per_block" else None
        op = (
            "constexpr_blockwise_shift_scale"
            if TARGETS[target].ios18_compression
            else "constexpr_affine_dequantize"
        )
        return QuantFormat("linear", None, parsed.dtype, parsed.granularity, None, block, op)
    return QuantFormat("prune", None, parsed.dtype, None, None, None, "constexpr_sparse_to_dense")
