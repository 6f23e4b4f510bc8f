"""dequantize_quantize_pair_elimination: quantize(dequantize(q)) with the same scale, zero point,
axis and integer dtype is q: its readers read q. A dequantize read by other ops too stays for
them (the seed's shortened path). The reverse pair, quantize then dequantize, is not redundant:
it is how a quantized op's output carries its parameters (the seed)."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def _param(op: Operation, arg: str):
    if arg not in op.inputs:
        return None
    value = stored(op.var(arg))
    return "not a const" if value is None else np.asarray(value)


def _same(a: Operation, b: Operation, arg: str, default) -> bool:
    x, y = _param(a, arg), _param(b, arg)
    if isinstance(x, str) or isinstance(y, str):
        return False
    x = np.asarray(default) if x is None else x
    y = np.asarray(default) if y is None else y
    return x.shape == y.shape and bool(np.array_equal(x.astype(np.float64), y.astype(np.float64)))


def run(edit: Editor, options: Options) -> None:
    for quantize in edit.ops("quantize"):
        deq = quantize.var("input").op
        if deq is None or deq.type != "dequantize" or edit.removed(deq):
            continue
        q: Var = deq.var("input")
        out = quantize.outputs[0]
        if q.type != out.type:
            continue
        if not all(_same(deq, quantize, arg, d) for arg, d in (("scale", 1.0), ("zero_point", 0))):
            continue
        scalar_params = _param(deq, "scale").ndim == 0
        if not scalar_params and not _same(deq, quantize, "axis", 0):
            continue
        if edit.merge_into(quantize, [q]) and not edit.used(deq.outputs[0]):
            edit.drop(deq)


PASS = GraphPass(
    "dequantize_quantize_pair_elimination",
    "optimize_quantization",
    "quantize(dequantize(q)) with the same parameters becomes q",
    run,
    needs=frozenset({"quantize"}),
)
