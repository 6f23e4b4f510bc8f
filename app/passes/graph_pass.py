"""What a graph pass is: a named rewrite of one function, with its options.

A pass module (app/passes/defs/<name>.py) defines `PASS = GraphPass(...)` around a function
`run(edit, options)` that rewrites `edit.fn` through the `Editor`; app/passes/catalogue.py lists
every module once. Options are the seed's, each with its default and its check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.passes.edit import Editor

# The seed's groups (coremltools' modules of graph passes), in its order; then the group of the
# passes beyond the seed, for the ANE (docs/passes.md, "Beyond the seed").
SEED_GROUPS = (
    "cleanup",
    "optimize_activation",
    "optimize_conv",
    "optimize_elementwise_binary",
    "optimize_linear",
    "optimize_normalization",
    "optimize_quantization",
    "optimize_repeat_ops",
    "optimize_state",
    "optimize_tensor_operation",
    "preprocess",
    "quantization",
    "symbol_transform",
)
GROUPS = (*SEED_GROUPS, "ane")


@dataclass(frozen=True)
class Option:
    """One option of a pass: its default and what a value must be (`check` returns the value as
    the pass reads it, or raises ValueError saying what it must be)."""

    default: Any
    check: Callable[[Any], Any]
    doc: str


Options = Mapping[str, Any]


@dataclass(frozen=True)
class GraphPass:
    name: str  # the seed's name
    group: str  # the seed's group, or "ane" (GROUPS)
    summary: str
    run: Callable[[Editor, Options], None]
    options: Mapping[str, Option] = field(default_factory=dict)
    # Op types the pass may write where the program had none: a pipeline for a runtime that
    # reports one of them failing leaves the pass out (app/passes/pipelines.py).
    creates: frozenset[str] = frozenset()
    # Op types the pass's patterns start from: a function with none of them is skipped (a
    # pipeline of thirty-odd steps costs little on a graph most of them have nothing to do in).
    # Empty: the pass looks at every op.
    needs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        assert self.group in GROUPS, self.group

    def defaults(self) -> dict[str, Any]:
        return {k: o.default for k, o in self.options.items()}


@dataclass(frozen=True)
class AtLeast:
    """An option that is a whole number of at least `minimum` (a class, not a closure: a
    pipeline travels to build processes, pickled)."""

    minimum: int

    def __call__(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            raise ValueError(f"a whole number of at least {self.minimum}")
        return value


def names(value: Any) -> frozenset[str]:
    """An option naming op types: a list, or a comma-separated string as coremltools takes."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError('op types, as a list or as a comma-separated string ("mul,const")')
    return frozenset(i.strip() for i in items if i.strip())
