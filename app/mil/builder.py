"""Builds programs op by op with type inference, so a wrong shape or dtype fails at build time.

    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 64, 1, 16))
    w = b.const("W", weights, DType.FP16)
    y = b.op("conv", "y", x=x, weight=w, strides=[1, 1], pad_type="valid")
    program = b.build([y])

Plain Python values given as op arguments become named const ops (`<op>_<arg>`), the way
coremltools serialises every parameter; a float literal takes the dtype of its tensor partner.
A literal is checked as data before it becomes an array: a number, a bool or a rectangular list
of them, every integer within its declared dtype (int32 by default: never wrapped around) and
every float finite within its dtype. Every value's type is checked against the builder's
ceilings (app/mil/ceilings.py) as it is made.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.language.targets import DEFAULT_TARGET, TARGETS, Target, get_target
from app.mil.ceilings import Ceilings
from app.mil.ir import (
    IDENTIFIER,
    ConstValue,
    Function,
    Input,
    MILBuildError,
    Operation,
    OpsetError,
    Program,
    Var,
)
from app.mil.literals import check_literal
from app.mil.ops import infer, lookup
from app.mil.types import DType, StateType, TensorType


class Builder:
    def __init__(
        self,
        target: str | Target = DEFAULT_TARGET,
        function: str = "main",
        ceilings: Ceilings = Ceilings(),
    ):
        self.target = get_target(target)
        self.function = function
        self.ceilings = ceilings
        self._inputs: list[Var] = []
        self._ops: list[Operation] = []
        self._names: set[str] = set()
        self._elements = self._bytes = 0  # of every value made so far

    def _count(self, t: TensorType, what: str) -> None:
        elements, nbytes = self.ceilings.tensor(t, what)
        self._elements += elements
        self._bytes += nbytes
        self.ceilings.program(self._elements, self._bytes, what)

    # -- names ------------------------------------------------------------------------------
    def _claim(self, name: str, what: str) -> str:
        if not IDENTIFIER.match(name):
            raise MILBuildError(
                what, None, f"{name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_@]*)"
            )
        if name in self._names:
            raise MILBuildError(what, None, f"name {name!r} is already used in this function")
        self._names.add(name)
        return name

    def unique(self, base: str) -> str:
        """A fresh name derived from `base` (base, base_1, base_2, ...)."""
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        return name

    # -- parameters and constants -------------------------------------------------------------
    def input(self, name: str, dtype: DType, shape: Sequence[int]) -> Var:
        t = TensorType(dtype, _dims(shape, name))
        self._count(t, f"input {name}")
        var = Var(self._claim(name, "input"), t)
        self._inputs.append(var)
        return var

    def state(self, name: str, dtype: DType, shape: Sequence[int]) -> Var:
        if not self.target.supports_state:
            first = next(t for t in TARGETS.values() if t.supports_state)
            raise OpsetError("state", name, f"states need {first}, not {self.target}")
        t = TensorType(dtype, _dims(shape, name))
        self._count(t, f"state {name}")
        var = Var(self._claim(name, "state"), StateType(t))
        self._inputs.append(var)
        return var

    def const(self, name: str, value, dtype: DType | None = None) -> Var:
        value = _const_value(value, dtype, name)
        self._count(value.type, f"const {name}")
        op = Operation("const", self._claim(name, "const"), {}, [], value)
        op.outputs.append(Var(op.name, value.type, op))
        self._ops.append(op)
        return op.outputs[0]

    # -- ops ---------------------------------------------------------------------------------
    def op(self, op_type: str, name: str, out: str | None = None, **args: object) -> Var:
        """Adds an op with one output and returns it, named `out` (by default the op's own
        name). An op with no output or several (write_state, split, topk) is `op_outputs`'."""
        return self._add(op_type, name, None if out is None else [out], args, one=True)[0]

    def op_outputs(
        self, op_type: str, name: str, out: Sequence[str] | None = None, **args: object
    ) -> tuple[Var, ...]:
        """Adds an op and returns its outputs, as many as it has (none for write_state). They
        are named `out`, by default the op's own name for one and `<name>_<i>` for several."""
        return self._add(op_type, name, None if out is None else list(out), args, one=False)

    def _add(
        self, op_type: str, name: str, names: list[str] | None, args: dict[str, object], one: bool
    ) -> tuple[Var, ...]:
        inputs = self._bind(op_type, name, {k: v for k, v in args.items() if v is not None})
        out_types = infer(op_type, name, inputs, self.target)
        if one and len(out_types) != 1:
            raise MILBuildError(
                f"{op_type} {name}",
                None,
                f"{len(out_types)} outputs where one was asked for (Builder.op_outputs takes any)",
            )
        for t in out_types:
            self._count(t, f"{op_type} {name}")
        if names is None:
            several = len(out_types) != 1
            names = [f"{name}_{i}" for i in range(len(out_types))] if several else [name]
        if len(names) != len(out_types):
            raise MILBuildError(
                f"{op_type} {name}", None, f"{len(names)} output names for {len(out_types)} outputs"
            )
        op = Operation(op_type, self._claim(name, op_type), inputs, [])
        for out_name, t in zip(names, out_types, strict=True):
            var_name = out_name if out_name == name else self._claim(out_name, op_type)
            op.outputs.append(Var(var_name, t, op))
        self._ops.append(op)
        return tuple(op.outputs)

    def _bind(self, op_type: str, name: str, args: dict[str, object]) -> dict[str, Input]:
        """Turns literal arguments into const ops; floats follow their partner tensor's dtype."""
        opdef = lookup(op_type, self.target)
        partner: dict[str, DType] = {}
        if opdef is not None:
            for arg, value in args.items():
                spec = opdef.args.get(arg)
                if isinstance(value, Var) and spec is not None and isinstance(spec.dtypes, str):
                    partner.setdefault(spec.dtypes, value.tensor.dtype)
        bound: dict[str, Input] = {}
        for arg, value in args.items():
            if isinstance(value, Var) or (
                isinstance(value, tuple) and all(isinstance(v, Var) for v in value)
            ):
                bound[arg] = value
            else:
                spec = opdef.args.get(arg) if opdef else None
                dtype = partner.get(spec.dtypes) if spec and isinstance(spec.dtypes, str) else None
                try:
                    bound[arg] = self.const(self.unique(f"{name}_{arg}"), value, dtype)
                except MILBuildError as exc:  # the op and argument are what the caller wrote
                    exc.op, exc.arg = f"{op_type} {name}", arg
                    exc.args = (f"op {exc.op!r}, argument {arg!r}: {exc.message}",)
                    raise
        return bound

    def build(self, outputs: Sequence[Var]) -> Program:
        for out in outputs:
            if out.op is None or out.op not in self._ops:
                raise MILBuildError("return", out.name, "an output must be produced by an op")
        fn = Function(self.function, list(self._inputs), list(self._ops), list(outputs))
        return Program(self.target, {self.function: fn})


def _dims(shape: Sequence[int], name: str) -> tuple[int, ...]:
    dims = tuple(int(d) for d in shape)
    if not 0 < len(dims) <= 5 or any(d < 1 for d in dims):
        raise MILBuildError(
            "input", name, f"shape {list(dims)} must have rank 1-5 and positive dims"
        )
    return dims


def _const_value(value, dtype: DType | None, name: str) -> ConstValue:
    if isinstance(value, str):
        return ConstValue(value, TensorType(DType.STRING, ()))
    if isinstance(value, ConstValue):
        _check_subbyte(value, name)
        return value
    if not isinstance(value, np.ndarray):
        check_literal(value, dtype, name)
    if isinstance(value, bool | np.bool_):
        dtype = dtype or DType.BOOL
    elif isinstance(value, int | np.integer) and dtype is None:
        dtype = DType.INT32
    elif isinstance(value, list | tuple) and dtype is None:
        array = np.asarray(value)
        dtype = {"b": DType.BOOL, "i": DType.INT32, "u": DType.INT32}.get(
            array.dtype.kind, DType.FP32
        )
    array = np.asarray(value)
    if dtype is None:
        dtype = DType.FP32 if array.dtype == np.float64 else DType.from_numpy(array.dtype)
    if array.dtype.kind not in "biuf":
        raise MILBuildError("const", name, f"cannot store a value of numpy dtype {array.dtype}")
    if dtype is not DType.STRING and array.dtype != dtype.numpy and array.dtype.kind != "f":
        _check_int_range(array, dtype, name)
        array = array.astype(dtype.numpy)  # small int/bool literals; float weights convert lazily
    const = ConstValue(array, TensorType(dtype, tuple(array.shape)))
    _check_subbyte(const, name)
    return const


def _check_int_range(array: np.ndarray, dtype: DType, name: str) -> None:
    """Integers converted to a narrower dtype must fit it: never wrap around."""
    if not dtype.is_int or array.dtype.kind not in "iu" or not array.size:
        return
    lo, hi = dtype.int_range
    if int(array.min()) < lo or int(array.max()) > hi:
        bad = int(array.min()) if int(array.min()) < lo else int(array.max())
        raise MILBuildError("const", name, f"{bad} is outside {dtype.value} [{lo}, {hi}]")


def _check_subbyte(value: ConstValue, name: str) -> None:
    """Sub-byte values live in int8/uint8 arrays, which can hold values their dtype cannot."""
    dtype = value.type.dtype
    if not dtype.is_subbyte or not value.type.size:
        return
    data = np.asarray(value.data)
    lo, hi = dtype.int_range
    if data.dtype.kind not in "iub" or int(data.min()) < lo or int(data.max()) > hi:
        raise MILBuildError("const", name, f"{dtype.value} holds integers in [{lo}, {hi}]")
