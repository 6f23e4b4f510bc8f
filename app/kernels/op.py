"""What a catalog op is: everything about it, declared in its own module.

An op module holds its parameters model, the weights it takes, how it builds its program, what
it means in float64 (the reference the fp16 program is judged against), how close the program
must come to that meaning, examples, the params its tests and sweeps draw, and the words the
catalog shows. Every registry (the catalog, the request union, the tolerance table, the test
cases) is derived from these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.kernels.params import OpParams
from app.kernels.space import ParamSpace
from app.mil import Builder, DType, TensorType, Var

Arrays = Mapping[str, np.ndarray]
# (params, inputs, weights as given, states before) -> (outputs, states after), in float64
Definition = Callable[[Any, Arrays, Arrays, Arrays], tuple[dict, dict]]
# The params an op's inputs fix when it is a node of a graph (shapes and dtypes flow from the
# graph), by input name; the node's own params give the rest.
Binding = Callable[[Mapping[str, TensorType]], dict[str, Any]]


@dataclass(frozen=True)
class WeightSpec:
    name: str
    shape: tuple[int, ...]  # the shape the program uses
    expr: str  # the same shape in parameter names, for the catalog
    dtype: DType  # how it is stored in weight.bin
    also_accepts: tuple[tuple[int, ...], ...] = ()  # other layouts of the same data, reshaped
    init_scale: float = 1.0  # std of random weights; random weights are init_offset + N(0, scale)
    init_offset: float = 0.0
    # A `quantize` option compresses it: shaped [out, in, ...], output channels first, then the
    # inputs each channel reads (the axes palette groups and linear blocks run along).
    quantizable: bool = False


@dataclass(frozen=True)
class WeightDoc:
    """A weight as the catalog shows it, independent of any particular params."""

    name: str
    shape: str
    required: str = "always"  # or the condition, e.g. "when bias is true"


def no_weights(params: Any) -> list[WeightSpec]:
    return []


def const_name(weight: str) -> str:
    """The const op that holds weight `weight`: its name with dots as underscores. Weights may be
    named as checkpoints name their tensors (`self_attn.q_proj.weight`); MIL identifiers have no
    dots."""
    return weight.replace(".", "_")


@dataclass(frozen=True)
class CatalogOp:
    name: str
    summary: str
    params: type[OpParams]
    build: Callable[[Builder, Any, dict[str, np.ndarray]], Sequence[Var]]
    definition: Definition
    # Bound on max|kernel − exact| / max|exact| per output (see app/reference/verify.py); each op
    # module says where its number comes from.
    tolerance: float
    # Small valid params: the first is the catalog's example, every one is a test case (together
    # they reach every branch of `build`).
    examples: tuple[dict[str, Any], ...]
    # The params its tests and its error sweep draw (app/kernels/space.py): every valid value of
    # every param, sizes aside (tests draw small axes, the sweep wide ones).
    param_space: ParamSpace
    weights: Callable[[Any], list[WeightSpec]] = no_weights
    weight_docs: tuple[WeightDoc, ...] = ()
    inputs: dict[str, str] = field(default_factory=dict)  # name -> shape expression
    outputs: dict[str, str] = field(default_factory=dict)
    experimental: str | None = None  # a caveat users should see in the catalog
    bind: Binding | None = None  # None: the op cannot be a graph node (e.g. it needs a state)
    # (params, weight budget in bytes) -> the params of each program of a chain that computes
    # the same within the budget, run in order, program k reading `x` from program k − 1's `y`
    # (None: the op is one program, whatever its size)
    parts: Callable[[Any, int], list[Any]] | None = None
    # (params, inputs drawn for verification, seed) -> notes: sets inputs whose standard-normal
    # draw means nothing (a cache length, RoPE tables) to values the op is meant for, in place,
    # and returns how each was drawn
    verification_inputs: Callable[[Any, dict[str, np.ndarray], int], dict[str, str]] | None = None
