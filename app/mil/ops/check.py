"""An op application checked against its record's declaration: arguments, dtypes, then the
record's type rule, which gives the output types."""

from __future__ import annotations

from collections.abc import Mapping

from app.language.targets import Target
from app.mil.call import Call
from app.mil.ir import Input, MILBuildError, OpsetError, Var
from app.mil.ops.record import Arg, Form, OpRecord
from app.mil.types import DType, StateType, TensorType


def check(
    record: OpRecord | None, op_type: str, name: str, inputs: Mapping[str, Input], target: Target
) -> list[TensorType]:
    """The output types of `op_type` applied to `inputs` in a target's opset."""
    form = record.form_in(target) if record is not None else None
    if record is None or form is None:
        raise MILBuildError(f"{op_type} {name}", None, f"unknown op type {op_type!r}")
    call = Call(record.name, name, inputs)
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
