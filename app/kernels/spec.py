"""What a catalog kernel is: its parameters, weights, I/O and how it builds its program."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.mil import Builder, DType, Var
from app.schemas import OpParams


class KernelSpecError(ValueError):
    """A request the catalog cannot build: `field` is the path of the offending input
    (e.g. "params.in_channels", "weights.weight", "target")."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class WeightSpec:
    name: str
    shape: tuple[int, ...]  # the shape the program uses
    expr: str  # the same shape in parameter names, for the catalog
    dtype: DType  # how it is stored in weight.bin
    also_accepts: tuple[tuple[int, ...], ...] = ()  # other layouts of the same data, reshaped
    init_scale: float = 1.0  # std of random weights; random weights are init_offset + N(0, scale)
    init_offset: float = 0.0


@dataclass(frozen=True)
class WeightDoc:
    """A weight as the catalog shows it, independent of any particular params."""

    name: str
    shape: str
    required: str = "always"  # or the condition, e.g. "when bias is true"


@dataclass(frozen=True)
class Kernel:
    name: str
    summary: str
    params: type[OpParams]
    build: Callable[[Builder, Any, dict[str, np.ndarray]], Sequence[Var]]
    weights: Callable[[Any], list[WeightSpec]] = lambda p: []
    weight_docs: tuple[WeightDoc, ...] = ()
    inputs: dict[str, str] = field(
        default_factory=dict
    )  # name -> shape expression, for the catalog
    outputs: dict[str, str] = field(default_factory=dict)
    experimental: str | None = None  # a caveat users should see in the catalog
