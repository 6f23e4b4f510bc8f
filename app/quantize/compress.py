"""One entry point: a weight and a config in, the constexpr arguments and the weight they give out."""

from __future__ import annotations

import numpy as np

from app.language.targets import DEFAULT_TARGET, Target
from app.mil.types import DType
from app.quantize.config import LinearConfig, PalettizeConfig, QuantizeConfig
from app.quantize.linear import linear
from app.quantize.palettize import palettize
from app.quantize.prune import prune
from app.quantize.result import Compressed


def quantize(
    weight: np.ndarray,
    config: QuantizeConfig,
    target: str | Target = DEFAULT_TARGET,
    *,
    channel_axis: int = 0,
    input_axis: int = 1,
    dtype: DType = DType.FP16,
    field: str = "quantize",
    weight_field: str = "weight",
) -> Compressed:
    """Compress `weight` (output channels on `channel_axis`, their inputs on `input_axis`) for
    `target`; the decompressed weight has `dtype`. Errors name `field` or `weight_field`."""
    if isinstance(config, PalettizeConfig):
        return palettize(
            weight,
            config,
            target,
            channel_axis=channel_axis,
            dtype=dtype,
            field=field,
            weight_field=weight_field,
        )
    if isinstance(config, LinearConfig):
        return linear(
            weight,
            config,
            target,
            channel_axis=channel_axis,
            input_axis=input_axis,
            dtype=dtype,
            field=field,
            weight_field=weight_field,
        )
    return prune(
        weight,
        config,
        target,
        channel_axis=channel_axis,
        dtype=dtype,
        field=field,
        weight_field=weight_field,
    )
