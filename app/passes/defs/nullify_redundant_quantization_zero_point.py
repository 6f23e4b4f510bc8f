"""nullify_redundant_quantization_zero_point: zero points of 0 go (0 is the default), and ±128
ones go where the shift can move elsewhere:

- quantize or dequantize with a zero point of zeros: the same op without it;
- dequantize of a constant with a zero point of -128 (int8) or 128 (uint8) in every element:
  the constant shifted by 128 into the other integer type, without a zero point;
- quantize(zero point ±128) read by a dequantize alone with the same zero point: both in the
  other integer type, without zero points (q + 128 is what uint8 holds for int8's q - -128).

Performance is better with zero point 0 (the seed); a zero point of another value stays."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, stored

_OTHER = {DType.INT8: (DType.UINT8, -128), DType.UINT8: (DType.INT8, 128)}


def _zero_point(op: Operation) -> np.ndarray | None:
    if "zero_point" not in op.inputs:
        return None
    var = op.var("zero_point")
    if const_op(var) is None:
        return None
    return np.asarray(stored(var)).astype(np.int64)


def _without(op: Operation, **changed) -> dict:
    args = {k: v for k, v in op.inputs.items() if k != "zero_point"}
    return {**args, **changed}


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("quantize", "dequantize"):
        if edit.removed(op):
            continue
        zero = _zero_point(op)
        if zero is None:
            continue
        if not zero.any():
            edit.swap(op, op.type, _without(op))
            continue
        integer = (op.outputs[0] if op.type == "quantize" else op.var("input")).tensor.dtype
        other, shift = _OTHER.get(integer, (None, 0))
        if other is None or not np.all(zero == shift):
            continue
        if op.type == "dequantize" and const_op(op.var("input")) is not None:
            data = np.asarray(stored(op.var("input"))).astype(np.int64) - shift
            moved = edit.const(f"{op.name}_input", data, other, op)
            edit.swap(op, "dequantize", _without(op, input=moved))
        elif op.type == "quantize":
            deq = edit.sole_reader(op.outputs[0])
            if (
                deq is None
                or deq.type != "dequantize"
                or (given := _zero_point(deq)) is None
                or not np.array_equal(given, zero)
            ):
                continue
            dtype = edit.const(f"{op.name}_output_dtype", other.value, DType.STRING, op)
            new = edit.swap(op, "quantize", _without(op, output_dtype=dtype))
            edit.swap(deq, "dequantize", _without(deq, input=new.outputs[0]))


PASS = GraphPass(
    "nullify_redundant_quantization_zero_point",
    "optimize_quantization",
    "zero points of 0 go; ±128 ones move into the data or the integer type",
    run,
    needs=frozenset({"quantize", "dequantize"}),
)
