"""A read-only view of a built program for the checks: program order, consumers, const values.

Built once per preflight run so that each check stays a small loop. Nothing here reads a weight's
data (weights may be large memory-mapped arrays): checks see shapes and dtypes only, except for
the small const arguments (axes, keep_dims, groups, ...) read through `const_value`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from app.mil import Function, Operation, Program, TensorType, Var
from app.mil.types import StateType


class ProgramView:
    def __init__(self, program: Program):
        self.program = program
        self.functions: list[Function] = list(program.functions.values())
        self._position: dict[int, int] = {}
        self._consumers: dict[int, list[Operation]] = {}
        # Every check walks these: listed once here instead of once per check.
        self._ops: list[Operation] = []
        self._by_type: dict[str, list[Operation]] = {}
        self._tensors: list[tuple[Operation | Var, TensorType]] = []
        self._runtime_tensors: list[tuple[Operation | Var, TensorType]] | None = None
        position = 0
        for fn in self.functions:
            for var in fn.inputs:
                self._position[id(var)] = position
                self._tensors.append((var, var.tensor))
                position += 1
            for op in fn.operations:
                self._position[id(op)] = position
                for out in op.outputs:
                    self._position[id(out)] = position
                    self._tensors.append((op, out.tensor))
                for var in _input_vars(op):
                    self._consumers.setdefault(id(var), []).append(op)
                if op.type != "const":
                    self._ops.append(op)
                    self._by_type.setdefault(op.type, []).append(op)
                position += 1

    def position(self, subject: Operation | Var) -> int:
        """Program order: a function's inputs, then its ops; an op's outputs share its place."""
        return self._position[id(subject)]

    def ops(self, *types: str) -> Iterator[Operation]:
        """Every non-const op in program order (only those of `types` when given)."""
        if not types:
            return iter(self._ops)
        if len(types) == 1:
            return iter(self._by_type.get(types[0], ()))
        return (op for op in self._ops if op.type in types)

    def consts(self) -> Iterator[Operation]:
        for fn in self.functions:
            yield from fn.consts()

    def inputs(self) -> Iterator[Var]:
        """Tensor parameters (states are reported by their own rules)."""
        for fn in self.functions:
            yield from (v for v in fn.inputs if not isinstance(v.type, StateType))

    def states(self) -> Iterator[Var]:
        for fn in self.functions:
            yield from (v for v in fn.inputs if isinstance(v.type, StateType))

    def outputs(self) -> Iterator[Var]:
        for fn in self.functions:
            yield from fn.outputs

    def io(self) -> Iterator[Var]:
        yield from self.inputs()
        yield from self.outputs()

    def consumers(self, var: Var) -> list[Operation]:
        return self._consumers.get(id(var), [])

    def tensors(self) -> Iterator[tuple[Operation | Var, TensorType]]:
        """Every tensor a function holds, in program order, with the IR object that makes it."""
        return iter(self._tensors)

    def runtime_tensors(self) -> Iterator[tuple[Operation | Var, TensorType]]:
        """`tensors()` without the compression operands that only a constexpr op reads (an
        iOS18 palette, indices, scales): constexpr ops expand them when the model loads, so they
        are never a tensor the compiled program computes on. coremltools' rank check
        (`Program._check_invalid_tensor_rank`) exempts exactly these: a const or constexpr
        output whose every consumer is a constexpr op."""
        if self._runtime_tensors is None:  # several checks walk them: listed once
            outputs = {id(v) for v in self.outputs()}
            self._runtime_tensors = [
                (subject, tensor)
                for subject, tensor in self._tensors
                if not (
                    isinstance(subject, Operation) and self._feeds_only_constexprs(subject, outputs)
                )
            ]
        return iter(self._runtime_tensors)

    def _feeds_only_constexprs(self, op: Operation, function_outputs: set[int]) -> bool:
        if op.type != "const" and not op.type.startswith("constexpr_"):
            return False
        for out in op.outputs:
            consumers = self.consumers(out)
            if id(out) in function_outputs or not consumers:
                return False
            if not all(c.type.startswith("constexpr_") for c in consumers):
                return False
        return True


def is_const(value: Var | tuple[Var, ...] | None) -> bool:
    return isinstance(value, Var) and value.op is not None and value.op.type == "const"


def const_value(value: Var | tuple[Var, ...] | None, default=None):
    """A small const argument as plain Python (int, bool, str, list); `default` if absent or not
    a const."""
    if not is_const(value):
        return default
    assert isinstance(value, Var) and value.op is not None and value.op.value is not None
    stored = value.op.value.stored()
    return stored if isinstance(stored, str) else np.asarray(stored).tolist()


def _input_vars(op: Operation) -> Iterator[Var]:
    for value in op.inputs.values():
        yield from value if isinstance(value, tuple) else (value,)


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"
