"""int_op_canonicalization: dequantize -> an op that only moves integers -> quantize with the same
parameters becomes that op applied to the quantized integers themselves (the seed: a quantized
reshape needs no float in between).

The ops it applies to are the ones that only reshape (the records' shape-only trait) and whose
declaration in the function's opset takes the quantized dtype: today reshape, from iOS17 on (its
record; coremltools 9.0 lists reshape at iOS17 alone). Taken only when the rewrite keeps every
value: the quantize reads the op alone, quantizes to the dequantize's own integer dtype with the
same scale and zero point, per tensor (one scale: a reshape moves which elements a per-channel
axis groups), and scale · (q - zero_point) is finite in the dequantize's float dtype for every
integer q (then quantizing it again gives q back). coremltools compares none of the parameters
and takes the rewrite whenever the pattern's op types match; here a quantize to other parameters
keeps its float path, which is what it computes. A dequantize read elsewhere too stays for its
other readers (as in coremltools)."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def _param(op: Operation, arg: str, default: float) -> np.ndarray | None:
    """A const parameter as float64 (its default when absent); None when not a const."""
    if arg not in op.inputs:
        return np.asarray(default, np.float64)
    value = stored(op.var(arg))
    return None if value is None or isinstance(value, str) else np.asarray(value, np.float64)


def _same_per_tensor(deq: Operation, quantize: Operation) -> bool:
    for arg, default in (("scale", 1.0), ("zero_point", 0.0)):
        a, b = _param(deq, arg, default), _param(quantize, arg, default)
        if a is None or b is None or a.ndim != 0 or b.ndim != 0 or a != b:
            return False
    return "axis" not in deq.inputs and "axis" not in quantize.inputs


def _finite(deq: Operation) -> bool:
    """scale · (q - zero_point) stays finite in the dequantize's dtype for every integer q."""
    scale, zero = _param(deq, "scale", 1.0), _param(deq, "zero_point", 0.0)
    assert scale is not None and zero is not None  # checked by _same_per_tensor
    info = np.iinfo(deq.var("input").tensor.dtype.numpy)
    widest = max(abs(info.min - float(zero)), abs(info.max - float(zero)))
    largest = float(np.finfo(deq.outputs[0].tensor.dtype.numpy).max)
    return abs(float(scale)) * widest <= largest


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops():
        if edit.removed(op) or not facts.is_shape_only(op.type) or "x" not in op.inputs:
            continue
        deq = op.var("x").op
        if deq is None or deq.type != "dequantize" or edit.removed(deq):
            continue
        quantize = edit.sole_reader(op.outputs[0])
        if quantize is None or quantize.type != "quantize":
            continue
        q = deq.var("input")
        out = quantize.outputs[0]
        if out.tensor.dtype is not q.tensor.dtype or not _same_per_tensor(deq, quantize):
            continue
        if not facts.takes(op.type, "x", q.tensor.dtype, edit.target) or not _finite(deq):
            continue
        moved = edit.op(op.type, out.name, {**op.inputs, "x": q}, op, out=[out.name])
        if not edit.replace(out, moved.outputs[0]):
            edit.remove(moved)
            continue
        edit.drop(quantize, op)
        if not edit.used(deq.outputs[0]):
            edit.drop(deq)


PASS = GraphPass(
    "int_op_canonicalization",
    "optimize_quantization",
    "dequantize -> reshape -> quantize with the same parameters becomes a reshape of the integers",
    run,
    needs=frozenset({"quantize"}),
)
