"""One IR operation being translated: typed access to its arguments for the rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from app.coreai.dtype_map import dtype_name
from app.coreai.weights import Constants
from app.mil import Operation, TensorType, Var


class NoCoreAIForm(ValueError):
    """A form of an op (its arguments, not its type) that has no Core AI translation: the
    translator refuses the request naming the node, before anything is written."""


def is_weight(var: Var) -> bool:
    """A value fixed when the program is built: a const, or what a constexpr op decompresses."""
    return var.op is not None and (var.op.type == "const" or var.op.type.startswith("constexpr_"))


class Step:
    """`value(arg)` gives an argument as a Core AI value, `const(arg)` as plain Python;
    `out` is the IR's output types, which every rule's results must match."""

    def __init__(self, op: Operation, value_of: Callable[[Var], Any], constants: Constants) -> None:
        self.op, self._value_of, self.constants = op, value_of, constants
        self.out: list[TensorType] = [v.tensor for v in op.outputs]

    def has(self, arg: str) -> bool:
        return arg in self.op.inputs

    def var(self, arg: str) -> Var:
        var = self.op.inputs[arg]
        assert isinstance(var, Var)
        return var

    def type(self, arg: str) -> TensorType:
        return self.var(arg).tensor

    def value(self, arg: str):
        return self._value_of(self.var(arg))

    def values(self, arg: str) -> list:
        items = self.op.inputs[arg]
        return [self._value_of(v) for v in (items if isinstance(items, tuple) else (items,))]

    def const(self, arg: str, default: Any = None) -> Any:
        var = self.op.inputs.get(arg)
        if var is None:
            return default
        assert isinstance(var, Var) and var.op is not None and var.op.value is not None
        stored = var.op.value.stored()
        return stored if isinstance(stored, str) else np.asarray(stored).tolist()

    def array(self, arg: str) -> np.ndarray | None:
        """A plain const argument's array; None when it is computed (or decompressed)."""
        var = self.var(arg)
        if var.op is None or var.op.type != "const" or var.op.value is None:
            return None
        return np.asarray(var.op.value.stored())

    def make(self, array: np.ndarray, like: TensorType | str):
        """A constant of the given (MIL tensor type's, or Core AI's named) dtype."""
        name = like if isinstance(like, str) else dtype_name(like.dtype)
        return self.constants.make(np.asarray(array), name)

    def indices(self, values, dtype: str = "int32"):
        """A small integer vector argument (axes, shapes, permutations)."""
        return self.constants.make(np.asarray(values), dtype)
