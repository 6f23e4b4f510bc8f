"""Weights that go into a program compressed: a request's `quantize` config applied to an op's
quantizable weights, and the builder that puts them in as constexpr ops.

An op's build asks for each weight with `const(name, values, dtype)`. The builder here answers
that call, for a weight being compressed, with the consts and constexpr op(s) app/quantize
computed, the last of them carrying the const's name, so op modules (and graph nodes built from
them) know nothing of quantization and the program reads the weight where it always did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.errors import RequestError
from app.kernels.op import WeightSpec
from app.language.targets import DEFAULT_TARGET
from app.mil import Builder, DType, Target, Var
from app.mil.ceilings import Ceilings
from app.quantize import (
    Compressed,
    QuantizeConfig,
    QuantizeConfigError,
    add_compressed,
    check_config,
    config_json,
    parse_config,
)


@dataclass(frozen=True)
class QuantizedWeight:
    """One weight as the program holds it: the config and what it compressed the weight into."""

    config: QuantizeConfig
    compressed: Compressed

    @property
    def decompressed(self) -> np.ndarray:
        """The values the program computes with (computed on each call: app/quantize/result.py)."""
        return self.compressed.decompressed

    @property
    def shape(self) -> tuple[int, ...]:
        return self.compressed.shape

    def to_json(self) -> dict[str, Any]:
        """kernel.json's account of it: the config, the ops and the bytes against fp16."""
        fp16_bytes = math.prod(self.shape) * 2
        return {
            **config_json(self.config),
            "ops": [op.op_type for op in self.compressed.ops],
            "stored_bytes": self.compressed.nbytes,
            "fp16_bytes": fp16_bytes,
            "ratio_to_fp16": round(self.compressed.nbytes / fp16_bytes, 4),
        }


def read_quantize(data: Mapping[str, Any] | QuantizeConfig, field: str) -> QuantizeConfig:
    """A config from a request (its JSON form, or parsed already); errors name `field`."""
    if not isinstance(data, Mapping):
        return data
    try:
        return parse_config(data, field)
    except QuantizeConfigError as exc:
        raise RequestError(exc.field, exc.message) from None


def check_quantize(
    op: str,
    specs: Sequence[WeightSpec],
    config: QuantizeConfig,
    target: str | Target,
    field: str = "quantize",
) -> list[WeightSpec]:
    """The weights `config` compresses, checked against their shapes and the target before any
    weight is read; errors name `field` (no weight to compress) or the config's key."""
    chosen = quantizable(op, specs, field)
    for spec in chosen:
        try:
            check_config(config, spec.shape, target, field=field)
        except QuantizeConfigError as exc:
            raise RequestError(exc.field, exc.message) from None
    return chosen


def quantizable(op: str, specs: Sequence[WeightSpec], field: str = "quantize") -> list[WeightSpec]:
    """The weights a quantize option compresses; an op without one refuses it, naming `field`."""
    chosen = [s for s in specs if s.quantizable]
    if not chosen:
        raise RequestError(
            field,
            f"{op} has no weight to quantize here: quantize compresses [out, in] weight matrices "
            "(those of conv and of matmul with static weights)",
        )
    return chosen


class CompressingBuilder(Builder):
    """A builder that puts the consts named in `compressed` in as their constexpr ops."""

    def __init__(
        self,
        target: str | Target = DEFAULT_TARGET,
        function: str = "main",
        ceilings: Ceilings = Ceilings(),
    ):
        super().__init__(target, function, ceilings)
        self.compressed: dict[str, Compressed] = {}  # const name -> what replaces it

    def const(self, name: str, value, dtype: DType | None = None) -> Var:
        compressed = self.compressed.get(name)
        if compressed is None:
            return super().const(name, value, dtype)
        return add_compressed(self, name, compressed)
