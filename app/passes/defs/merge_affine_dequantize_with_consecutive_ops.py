"""merge_affine_dequantize_with_consecutive_ops: a constexpr_affine_dequantize read by one op
that only moves its values (transpose; and, for a per-tensor scale and zero point, an op that
only reshapes, by its record: reshape, expand_dims, squeeze) becomes one constexpr_affine_dequantize of the moved integers: the weight
stays compressed in the layout its reader reads, and the op moving it at run time goes. A
per-channel scale follows its axis through a transpose (the new axis is where the perm puts
it); through a reshape it would not be one axis any more, so that stays. Repeated, a chain of
them folds. Not taken: quantized data read by another op too (it would be stored twice), a
constexpr read elsewhere, a function output."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation
from app.mil.types import DType
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, stored


def _merge(edit: Editor, op: Operation) -> bool:
    out = op.outputs[0]
    mover = edit.sole_reader(out)
    data = op.var("quantized_data")
    if mover is None or const_op(data) is None:
        return False
    if mover.type != "transpose" and not facts.is_shape_only(mover.type):
        return False
    if len(edit.readers(data)) != 1 or edit.is_output(data):
        return False
    scale = np.asarray(stored(op.var("scale")))
    zero = np.asarray(stored(op.var("zero_point")))
    values = np.asarray(stored(data))
    axis = int(np.asarray(stored(op.var("axis"))))
    per_tensor = scale.size == 1 and zero.size == 1
    moved = mover.outputs[0]
    if mover.type == "transpose":
        perm = [int(p) % values.ndim for p in np.asarray(stored(mover.var("perm"))).reshape(-1)]
        new_values = np.transpose(values, perm)
        new_axis = 0 if per_tensor else perm.index(axis % values.ndim)
    elif per_tensor:
        new_values, new_axis = values.reshape(moved.tensor.shape), 0
    else:
        return False
    name = mover.name
    args = {
        "quantized_data": edit.const(f"{name}_quantized", new_values, data.tensor.dtype, mover),
        "zero_point": op.inputs["zero_point"],
        "scale": op.inputs["scale"],
        "axis": edit.const(f"{name}_axis", np.array(new_axis), DType.INT32, mover),
    }
    new = edit.op("constexpr_affine_dequantize", name, args, mover, out=[moved.name])
    edit.replace(moved, new.outputs[0])
    edit.drop(mover, op)
    return True


def _sweep(edit: Editor) -> bool:
    changed = False
    for op in edit.ops("constexpr_affine_dequantize"):
        if not edit.removed(op):
            changed |= _merge(edit, op)
    return changed


def run(edit: Editor, options: Options) -> None:
    edit.repeat(_sweep)


PASS = GraphPass(
    "merge_affine_dequantize_with_consecutive_ops",
    "optimize_quantization",
    "constexpr_affine_dequantize -> transpose / reshape / expand_dims / squeeze becomes one "
    "constexpr_affine_dequantize of the moved data",
    run,
    needs=frozenset({"constexpr_affine_dequantize"}),
)
