"""add_fp16_cast: every op computing in fp32 computes in fp16: its fp32 inputs are cast to fp16
(an fp32 const is stored in fp16 instead), and each fp32 output is cast back, that cast taking
the output's name, so the function's inputs and outputs keep their dtypes. cast_optimization
then removes the fp16 -> fp32 -> fp16 pairs this leaves between two such ops, and only the casts
at the function's edges remain.

The ANE computes in fp16 only (the preflight's compute_dtype rule, from ANEForge); coremltools
does the same for every ML program by default (compute_precision FLOAT16). An op with an fp32
constant beyond fp16's range (65504) keeps computing in fp32, as in coremltools; so do casts,
state ops, constexpr ops and the op types named in `skip_ops_by_type`. An argument the op's
record declares without fp16 (upsample_bilinear's scale factors: fp32 or int32) stays as it is,
as coremltools leaves a parameter whose type domain has no fp16 (coremltools 9.0,
mil/passes/defs/quantization.py, `should_cast_parameter`)."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType, TensorType
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Option, Options, names
from app.passes.patterns import const_op, given

_FP16_MAX = float(np.finfo(np.float16).max)


def _fp32(var: Var) -> bool:
    t = var.type
    return isinstance(t, TensorType) and t.dtype is DType.FP32


def _fits_fp16(value: np.ndarray | None) -> bool:
    """Whether an fp32 const's finite values (as given) are within fp16's range."""
    if value is None or not value.size:
        return True
    largest = float(np.abs(value).max())  # inf or nan when one is: then the finite ones
    if largest <= _FP16_MAX:
        return True
    return float(np.abs(value[np.isfinite(value)]).max(initial=0)) <= _FP16_MAX


def run(edit: Editor, options: Options) -> None:
    skip = options["skip_ops_by_type"]
    halves: dict[Var, Var] = {}  # an fp32 value -> its fp16 stand-in
    fp16_args: dict[tuple[str, ...], frozenset[str]] = {}  # (op type, *arguments) -> the fp16 ones
    for op in edit.ops():
        if op.type in ("const", "cast") or op.type in skip or facts.is_stateful(op.type):
            continue
        if facts.is_constexpr(op.type):
            continue
        form = (op.type, *op.inputs)
        halving = fp16_args.get(form)
        if halving is None:
            halving = fp16_args[form] = frozenset(
                a for a in op.inputs if facts.takes_fp16(op.type, a, edit.target)
            )
        wide_inputs = [
            v for a, value in op.inputs.items() if a in halving for v in _vars(value) if _fp32(v)
        ]
        if not wide_inputs:
            continue
        # the consts' values as given (each rounded once to fp16 from them, as from `wide`)
        data = {v: given(v) for v in wide_inputs if const_op(v)}
        if not all(_fits_fp16(d) for d in data.values()):
            continue
        args = {}
        for arg, value in op.inputs.items():
            if arg not in halving:
                args[arg] = value
            elif isinstance(value, tuple):
                args[arg] = tuple(_half(edit, v, op, halves, data.get(v)) for v in value)
            else:
                args[arg] = _half(edit, value, op, halves, data.get(value))
        if _in_place(edit, op, args):
            continue
        edit.remove(op)  # its names are free for what replaces it
        edit.remove_if_unused(
            *(v.op for v in wide_inputs if v.op and const_op(v) and halves.get(v) is not v)
        )
        # an output that turns fp16 is cast back under its name; the op keeps its own name
        # unless one of its outputs does
        turned = [v.tensor.dtype is DType.FP32 for v in op.outputs]
        name = edit.fresh(f"{op.name}_fp16") if any(turned) else op.name
        outs = [
            edit.fresh(f"{v.name}_fp16") if t else v.name
            for v, t in zip(op.outputs, turned, strict=True)
        ]
        new = edit.op(op.type, name, args, op, out=outs)
        for old, made in zip(op.outputs, new.outputs, strict=True):
            if old.tensor.dtype is DType.FP32 and made.tensor.dtype is DType.FP16:
                made = _cast(edit, made, "fp32", old.name, op)
            edit.replace(old, made)


def _in_place(edit: Editor, op: Operation, args: dict) -> bool:
    """When only consts turn fp16 and the op's outputs keep their types (a conv's fp32 weight
    beside its fp16 input), the op itself stays: its arguments are rewired, nothing is remade."""
    if any(v.tensor.dtype is DType.FP32 for v in op.outputs):
        return False
    if facts.output_types(op.type, op.name, args, edit.target) != [v.tensor for v in op.outputs]:
        return False
    for arg, value in args.items():
        if value is not op.inputs[arg]:
            old = op.inputs[arg]
            edit.set_input(op, arg, value)
            edit.remove_if_unused(*(v.op for v in _vars(old) if v.op is not None and const_op(v)))
    return True


def _half(
    edit: Editor, var: Var, before: Operation, halves: dict[Var, Var], data: np.ndarray | None
) -> Var:
    """`var` in fp16 (a cast, or a const stored in fp16: `data`, its value), made once per
    value."""
    if not _fp32(var):
        return var
    if var not in halves:
        const = const_op(var)
        if const is not None and data is not None and edit.readers(var) == [before]:
            # read here alone: stored in fp16 under its own name (a weight keeps its name), the
            # const renewed in place and placed before its reader
            halves[var] = edit.const_for(var, before, var.name, data, DType.FP16, before)
        elif const is not None and data is not None:
            halves[var] = edit.const(f"{var.name}_to_fp16", data, DType.FP16, before)
        else:
            halves[var] = _cast(edit, var, "fp16", edit.fresh(f"{var.name}_to_fp16"), before)
    return halves[var]


def _cast(edit: Editor, var: Var, dtype: str, name: str, before: Operation) -> Var:
    target = edit.const(f"{name}_dtype", dtype, DType.STRING, before)
    return edit.op("cast", name, {"x": var, "dtype": target}, before).outputs[0]


def _vars(value):
    return value if isinstance(value, tuple) else (value,)


PASS = GraphPass(
    "add_fp16_cast",
    "quantization",
    "ops computing in fp32 compute in fp16, with casts at the function's edges",
    run,
    {
        "skip_ops_by_type": Option(
            frozenset(), names, "op types left computing in fp32 (a list, or comma-separated)"
        )
    },
)
