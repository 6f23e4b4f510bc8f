"""An op application checked against its record's declaration: arguments, dtypes, then the
record's type rule, which gives the output types.

A checked application's types are remembered: the checks read only the arguments' types and
where they come from (a const, a constexpr op, another op), and the rule reads only those and the
values it asks for (`Call.value`), so an application alike in all of these has the same types.
The graph passes remake ops of the types they had (a conv with its bias folded, then its scale),
and programs repeat ops alike (a layer after another): each is checked once.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.language.targets import Target
from app.mil.call import Call
from app.mil.ir import Input, MILBuildError, OpsetError, Var
from app.mil.ops.record import Arg, Form, OpRecord
from app.mil.types import DType, StateType, TensorType


def check(
    record: OpRecord | None, op_type: str, name: str, inputs: Mapping[str, Input], target: Target
) -> list[TensorType]:
    """The output types of `op_type` applied to `inputs` in a target's opset."""
    key = (op_type, target, tuple((arg, _typed(value)) for arg, value in inputs.items()))
    alike = _CHECKED.get(key, [])
    for known, read, remembered in alike:
        if known is record and all(_fingerprint(inputs.get(a)) == f for a, f in read):
            return list(remembered)
    call = Call(record.name if record is not None else op_type, name, inputs)
    types = _check(record, call, target)
    read = tuple((a, _fingerprint(inputs.get(a))) for a in sorted(call.read))
    if sum(_size(f) for _, f in read) <= _SMALL:
        if len(_CHECKED) >= _REMEMBERED:
            _CHECKED.clear()
        if len(alike) >= _VARIANTS:  # the oldest goes: reshapes of one type to many shapes
            del alike[0]
        alike.append((record, read, tuple(types)))
        _CHECKED[key] = alike
    return types


# (op type, target, each argument's types and sources) -> (record, the values its rule read,
# the output types) for the applications checked; only those whose rule read at most _SMALL
# bytes of values (shapes, axes, modes; not a decompression's indices or a per-channel alpha),
# so that it holds a few MiB at the most
_CHECKED: dict[tuple, list[tuple[OpRecord | None, tuple, tuple[TensorType, ...]]]] = {}
_REMEMBERED, _VARIANTS, _SMALL = 4096, 16, 256


def _typed(value: Input) -> tuple:
    """What the checks read of an argument: each value's type, and whether a const or a
    constexpr op makes it (`_fixed`)."""
    if isinstance(value, tuple):
        return tuple((v.type, _source(v)) for v in value)
    return (value.type, _source(value))


def _source(var: Var) -> str | None:
    op = var.op
    if op is None or not (op.type == "const" or op.type.startswith("constexpr_")):
        return None
    return op.type


def _fingerprint(value: Input | None) -> tuple | None:
    """A value a rule read, to compare with another (None: absent or not a const)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(_fingerprint(v) for v in value)
    if value.op is None or value.op.value is None:
        return ()
    stored = value.op.value.stored()
    if isinstance(stored, str):
        return ("str", stored)
    array = np.asarray(stored)
    return (array.dtype.str, array.shape, array.tobytes())


def _size(fingerprint: tuple | None) -> int:
    """Bytes a fingerprint keeps of the values it stands for."""
    if not fingerprint:
        return 0
    if fingerprint[0] == "str":
        return len(fingerprint[1])
    if isinstance(fingerprint[0], str):  # (dtype, shape, bytes)
        return len(fingerprint[2])
    return sum(_size(f) for f in fingerprint)  # a variadic argument's values


def _check(record: OpRecord | None, call: Call, target: Target) -> list[TensorType]:
    op_type, name, inputs = call.op_type, call.name, call.inputs
    form = record.form_in(target) if record is not None else None
    if record is None or form is None:
        raise MILBuildError(f"{op_type} {name}", None, f"unknown op type {op_type!r}")
    if not target.includes(record.since):
        raise OpsetError(
            f"{op_type} {name}", None, f"not in the {target} opset (available from {record.since})"
        )
    for arg in inputs:
        if arg not in form.args:
            raise call.fail(arg, f"unknown argument; expected {', '.join(form.args)}")
    bound: dict[str, DType] = {}
    for arg, spec in form.args.items():
        if arg not in inputs:
            if not spec.optional:
                raise call.fail(arg, "required argument is missing")
            continue
        _check_arg(call, form, arg, spec, inputs[arg], bound)
    try:
        return form.infer(call)
    except MILBuildError:
        raise
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError) as exc:
        # A rule reads its const arguments as the op defines them (a scalar axis, a list of
        # reps); one given in another form (a list for a scalar, a nested list) lands here.
        raise call.fail(None, f"an argument is not of the form the op takes: {exc}") from None


def _check_arg(
    call: Call, form: Form, arg: str, spec: Arg, value: Input, bound: dict[str, DType]
) -> None:
    if spec.variadic != isinstance(value, tuple):
        raise call.fail(arg, "expects a tuple of values" if spec.variadic else "expects one value")
    for var in value if isinstance(value, tuple) else (value,):
        if spec.state != isinstance(var.type, StateType):
            raise call.fail(arg, f"expects a {'state' if spec.state else 'tensor'}, got {var.type}")
        if spec.const and not _fixed(var):
            raise call.fail(arg, f"must be a const, got {var.name!r}")
        dtype = var.tensor.dtype
        if isinstance(spec.dtypes, str) and bound.setdefault(spec.dtypes, dtype) != dtype:
            raise call.fail(arg, f"dtype {dtype.value} differs from {bound[spec.dtypes].value}")
        allowed = form.allowed(spec)
        if dtype not in allowed:
            names = ", ".join(sorted(d.value for d in allowed))
            raise call.fail(arg, f"dtype {dtype.value} is not allowed (expected {names})")


def _fixed(var: Var) -> bool:
    """A value known when the program is built: a const, or (as coremltools takes it for a
    const argument) a float tensor a constexpr op decompresses, such as a compressed linear
    weight. Type rules read the values of integer, bool and string consts only, which no
    constexpr op makes."""
    if var.op is None:
        return False
    if var.op.type == "const":
        return True
    return var.op.type.startswith("constexpr_") and var.tensor.dtype.is_float
