"""An op's arguments as the reference executor runs it: arrays by argument name."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

import numpy as np

from app.mil.ir import Input, Operation, Var


class Args:
    """An op's arguments during execution: arrays by argument name, consts as Python values.
    `values` holds every var's value by name: an array, or a string const's string."""

    def __init__(
        self,
        op: Operation,
        values: Mapping[str, np.ndarray | str],
        states: MutableMapping[str, np.ndarray],
        exact: bool = False,
    ):
        self.op, self._values, self.states = op, values, states
        self.exact = exact  # the float64 meaning: nothing is rounded to a stored dtype after
        self._elementwise = np.float64 if exact else np.float32

    def has(self, arg: str) -> bool:
        return arg in self.op.inputs

    def _value(self, arg: str) -> np.ndarray | str:
        var = self.op.inputs[arg]
        assert isinstance(var, Var)
        return self._values[var.name]

    def _array(self, name: str) -> np.ndarray:
        value = self._values[name]
        if isinstance(value, str):
            raise TypeError(f"{self.op.type} {self.op.name}: {name!r} is a string, not a tensor")
        return value

    def __getitem__(self, arg: str) -> np.ndarray:
        var = self.op.inputs[arg]
        assert isinstance(var, Var)
        return self._array(var.name)

    def many(self, arg: str) -> list[np.ndarray]:
        value: Input = self.op.inputs[arg]
        return [self._array(v.name) for v in (value if isinstance(value, tuple) else (value,))]

    def const(self, arg: str, default=None):
        if arg not in self.op.inputs:
            return default
        value = self._value(arg)
        return value if isinstance(value, str) else np.asarray(value).tolist()

    def state_name(self, arg: str) -> str:
        var = self.op.inputs[arg]
        assert isinstance(var, Var)
        return var.name

    def f32(self, arg: str) -> np.ndarray:
        """For elementwise ops: float32 (exact products of fp16 values), float64 when exact."""
        return _compute(self[arg], self._elementwise)

    def f64(self, arg: str) -> np.ndarray:
        return _compute(self[arg], np.float64)


def _compute(a: np.ndarray, dtype: type) -> np.ndarray:
    """Float inputs widen to the compute dtype; integer and bool arrays stay exact (int64)."""
    a = np.asarray(a)
    return a.astype(dtype if a.dtype.kind == "f" else np.int64)
