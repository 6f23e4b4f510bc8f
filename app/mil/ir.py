"""The program IR, mirroring MIL.proto: Program -> Function -> operations with typed, named outputs.

Everything here is plain data. Building and checking happens in `builder`, spelling in `text` and
`proto`; this module only says what a program is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from app.language.targets import BLOB_MIN_SIZE, Target
from app.mil.types import StateType, TensorType, ValueType

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_@]*\Z")


class MILBuildError(ValueError):
    """A program that cannot be built: names the op (and argument) at fault."""

    def __init__(self, op: str, arg: str | None, message: str):
        self.op, self.arg, self.message = op, arg, message
        where = f"op {op!r}" + (f", argument {arg!r}" if arg else "")
        super().__init__(f"{where}: {message}")


class OpsetError(MILBuildError):
    """The op (or a state) is not in the target's opset: the target, not the program, is at fault."""


@dataclass(eq=False, slots=True)
class Var:
    name: str
    type: ValueType
    op: Operation | None = None  # the producing op; None for function parameters

    @property
    def tensor(self) -> TensorType:
        """The tensor type, for state vars the wrapped tensor."""
        return self.type.tensor if isinstance(self.type, StateType) else self.type

    def __repr__(self) -> str:
        return f"Var({self.name}: {self.type})"


@dataclass(frozen=True, eq=False)
class ConstValue:
    """A constant's value. `data` may be wider than `type` (fp32 data for an fp16 weight): it is
    converted when stored, so large weights are never copied just to change precision."""

    data: np.ndarray | str
    type: TensorType

    def stored(self) -> np.ndarray | str:
        """The value as the program sees it, in the declared dtype."""
        if isinstance(self.data, str):
            return self.data
        return (
            np.asarray(self.data).astype(self.type.dtype.numpy, copy=False).reshape(self.type.shape)
        )

    def stored_array(self) -> np.ndarray:
        """`stored()` of a tensor (every const but a string)."""
        stored = self.stored()
        if isinstance(stored, str):
            raise TypeError(f"a string const ({stored!r}) where a tensor was expected")
        return stored

    @property
    def nbytes(self) -> int:
        """Bytes the value takes stored (sub-byte values packed)."""
        return -(-self.type.size * self.type.dtype.bits // 8)

    def in_blob(self, target: Target) -> bool:
        return self.type.dtype in target.blob_dtypes and self.type.size >= BLOB_MIN_SIZE


Input = Var | tuple[Var, ...]


@dataclass(eq=False, slots=True)
class Operation:
    type: str
    name: str
    inputs: dict[str, Input]
    outputs: list[Var]
    value: ConstValue | None = None  # const ops only

    @property
    def output(self) -> Var:
        (out,) = self.outputs
        return out

    def var(self, arg: str) -> Var:
        """The var a one-var argument reads (a variadic argument's tuple is in `inputs`)."""
        value = self.inputs[arg]
        if not isinstance(value, Var):
            raise TypeError(f"{self.type} {self.name}: argument {arg!r} is a tuple of vars")
        return value

    def vars(self, arg: str) -> tuple[Var, ...]:
        """The vars a variadic argument reads (`concat`'s and `stack`'s values)."""
        value = self.inputs[arg]
        if isinstance(value, Var):
            raise TypeError(f"{self.type} {self.name}: argument {arg!r} is one var")
        return value


@dataclass(eq=False)
class Function:
    name: str
    inputs: list[Var]
    operations: list[Operation]
    outputs: list[Var]

    def consts(self) -> list[Operation]:
        return [op for op in self.operations if op.type == "const"]


@dataclass(eq=False)
class Program:
    target: Target
    functions: dict[str, Function] = field(default_factory=dict)
    default: str = "main"  # the function run when none is named

    @property
    def main(self) -> Function:
        """The default function."""
        return self.functions[self.default]

    @property
    def multifunction(self) -> bool:
        """Described function by function (ModelDescription.functions), not as one model."""
        return len(self.functions) > 1 or self.default != "main"

    def blob_consts(self) -> list[Operation]:
        """Consts stored in weight.bin, in program order (which fixes their offsets)."""
        return [
            op
            for fn in self.functions.values()
            for op in fn.consts()
            if op.value is not None and op.value.in_blob(self.target)
        ]
