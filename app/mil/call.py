"""One op application being checked by the builder: what an op's type-inference rule sees."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.mil.ir import Input, MILBuildError, Var
from app.mil.types import TensorType


class Call:
    """One op application being checked: typed access to its arguments for inference rules."""

    def __init__(self, op_type: str, name: str, inputs: Mapping[str, Input]):
        self.op_type, self.name, self.inputs = op_type, name, inputs
        # the arguments whose values the rule read (through `value`): with the arguments' types,
        # all its result follows from (app/mil/ops/check.py remembers results by them)
        self.read: set[str] = set()

    def fail(self, arg: str | None, message: str) -> MILBuildError:
        return MILBuildError(f"{self.op_type} {self.name}", arg, message)

    def has(self, arg: str) -> bool:
        return arg in self.inputs

    def type(self, arg: str) -> TensorType:
        var = self.inputs[arg]
        assert isinstance(var, Var)
        return var.tensor

    def types(self, arg: str) -> list[TensorType]:
        value = self.inputs[arg]
        return [v.tensor for v in (value if isinstance(value, tuple) else (value,))]

    def value(self, arg: str) -> np.ndarray | str | None:
        """A const argument's stored value; None when it is absent or not a const (a constexpr
        op's output, made when the model loads). Rules read values through here only."""
        self.read.add(arg)
        var = self.inputs.get(arg)
        if not isinstance(var, Var) or var.op is None or var.op.value is None:
            return None
        return var.op.value.stored()

    def const(self, arg: str, default=None):
        """The const value of an argument as plain Python (int, bool, str, list)."""
        if arg not in self.inputs:
            return default
        value = self.value(arg)
        assert value is not None, f"{arg} is not a const"
        return value if isinstance(value, str) else np.asarray(value).tolist()

    def axes(self, arg: str, rank: int, default=None) -> list[int]:
        """Axes normalised to 0..rank-1, checked in range and unique."""
        raw = self.const(arg, default)
        raw = [raw] if isinstance(raw, int) else list(raw)
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in raw):
            raise self.fail(arg, f"expects an axis or a flat list of axes, got {raw}")
        out = []
        for a in raw:
            if not -rank <= a < rank:
                raise self.fail(arg, f"axis {a} is out of range for rank {rank}")
            out.append(a % rank)
        if len(set(out)) != len(out):
            raise self.fail(arg, f"repeated axis in {raw}")
        return out
