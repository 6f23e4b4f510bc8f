"""Rotary position embeddings as Llama-family checkpoints define them.

Frequencies: inv_freq[i] = rope_theta^(−2i / head_dim) for i < head_dim / 2 (the default,
unscaled rotation), optionally rescaled by a `rope_scaling` of type `llama3`: wavelengths longer
than original_max_position_embeddings / low_freq_factor are slowed down by `factor`, those shorter
than original_max_position_embeddings / high_freq_factor are kept, and the band in between is
interpolated linearly in original_max_position_embeddings / wavelength. Both types leave the
attention scaling at 1.

A token at position p is rotated by the angles p·inv_freq, each used twice (the first and second
half of head_dim, Hugging Face's `rotate_half` layout):
    x' = x·cos + rotate_half(x)·sin,   rotate_half([x1, x2]) = [−x2, x1]
The tables are computed in float64; a program stores them in fp16 (baked constants for a prefill
at known positions) or takes them as inputs (decode, where positions change every call).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class Llama3RopeScaling(BaseModel):
    """`rope_scaling` of type llama3, under the config's own key names."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rope_type: Literal["llama3"] = Field(description="the only scaled rotation supported")
    factor: float = Field(gt=0)
    low_freq_factor: float = Field(gt=0)
    high_freq_factor: float = Field(gt=0)
    original_max_position_embeddings: int = Field(ge=1)

    @model_validator(mode="after")
    def _band(self) -> Llama3RopeScaling:
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("high_freq_factor must be greater than low_freq_factor")
        return self


def inv_freq(head_dim: int, theta: float, scaling: Llama3RopeScaling | None) -> np.ndarray:
    """The head_dim / 2 rotation frequencies, in float64."""
    freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return freq
    old_len = scaling.original_max_position_embeddings
    wavelength = 2 * math.pi / freq
    long_limit = old_len / scaling.low_freq_factor  # longer wavelengths: divided by factor
    short_limit = old_len / scaling.high_freq_factor  # shorter ones: kept as they are
    slowed = np.where(wavelength > long_limit, freq / scaling.factor, freq)
    # between the limits: a linear blend, weight 0 at long_limit and 1 at short_limit
    blend = (old_len / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - blend) * slowed / scaling.factor + blend * slowed
    between = (wavelength >= short_limit) & (wavelength <= long_limit)
    return np.where(between, blended, slowed)


def tables(
    positions: np.ndarray, head_dim: int, theta: float, scaling: Llama3RopeScaling | None
) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each [len(positions), head_dim] in float64, for the given token positions."""
    angles = np.asarray(positions, np.float64)[:, None] * inv_freq(head_dim, theta, scaling)
    both = np.concatenate([angles, angles], axis=-1)
    return np.cos(both), np.sin(both)


def rope_inputs(
    positions, head_dim: int, theta: float = 10000.0, scaling: Llama3RopeScaling | None = None
) -> dict[str, np.ndarray]:
    """The `cos` and `sin` inputs of a decode program for its new tokens' positions: fp16
    [1, 1, head_dim, T] (head_dim along channels, tokens along the last axis)."""
    cos, sin = tables(np.asarray(positions), head_dim, theta, scaling)
    return {
        "cos": cos.T[None, None].astype(np.float16),
        "sin": sin.T[None, None].astype(np.float16),
    }
