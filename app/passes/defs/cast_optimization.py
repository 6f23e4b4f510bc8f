"""cast_optimization: a cast to the dtype its input has already goes; two casts in a row become
one when the first loses nothing the second keeps: the range and resolution the pair lets
through are those of the second cast alone (fp16 -> fp32 -> fp16 is no cast at all; fp32 ->
fp16 -> fp32 rounds, and stays)."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored

_CAST_NAMES = {"fp16": DType.FP16, "fp32": DType.FP32, "int32": DType.INT32, "bool": DType.BOOL}


def _range(dtype: DType) -> tuple[float, float, float]:
    """(lowest, highest, resolution) of a dtype: NumPy's own figures for floats (finfo's
    resolution: 1e-3 for fp16, 1e-6 for fp32), 1 for integers and booleans."""
    if dtype is DType.BOOL:
        return 0.0, 1.0, 1.0
    if dtype.is_float:
        info = np.finfo(dtype.numpy)
        return float(info.min), float(info.max), float(info.resolution)
    iinfo = np.iinfo(dtype.numpy)
    return float(iinfo.min), float(iinfo.max), 1.0


def _through(*dtypes: DType) -> tuple[float, float, float]:
    low, high, step = _range(dtypes[0])
    for d in dtypes[1:]:
        lo, hi, res = _range(d)
        low, high, step = max(low, lo), min(high, hi), max(step, res)
    return low, high, step


def _target(op) -> DType:
    name = stored(op.var("dtype"))
    assert isinstance(name, str)  # a cast's dtype is a string const
    return _CAST_NAMES[name]


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("cast"):
        x: Var = op.var("x")
        source = x
        first = x.op if x.op is not None and x.op.type == "cast" else None
        if first is not None:
            origin = first.var("x").tensor.dtype
            if _through(origin, _target(first), _target(op)) != _through(origin, _target(op)):
                first = None
            else:
                source = first.var("x")
        if source.tensor.dtype == op.outputs[0].tensor.dtype:
            changed = edit.merge_into(op, [source])
        elif first is not None:
            changed = bool(edit.swap(op, "cast", {"x": source, "dtype": op.var("dtype")}))
        else:
            changed = False
        if changed and first is not None:
            edit.remove_if_unused(first)
            edit.remove_if_unused(first.var("dtype").op)


PASS = GraphPass(
    "cast_optimization",
    "optimize_repeat_ops",
    "drops casts to the dtype a value has, and merges casts in a row that lose nothing",
    run,
    needs=frozenset({"cast"}),
)
