"""compose_conv1d: a 1-D convolution spelt as a 2-D one over a dummy axis becomes one conv of the
rank-3 input, in either of the seed's two patterns:

1. channels first (TensorFlow's Conv1D, some PyTorch backends): expand_dims(x, axes=[2]) -> a
   conv with a kernel one high -> squeeze(axes=[2]) becomes conv(x); axes -2 alike.
2. channels last (TensorFlow's Conv1D on (B, S, C)): expand_dims(x, axes=[1]) -> transpose with
   perm (0, 3, 1, 2) -> the conv -> transpose with perm (0, 2, 3, 1) -> squeeze(axes=[1])
   becomes transpose(x, perm (0, 2, 1)) -> conv -> transpose(perm (0, 2, 1)); axes -3 and
   negative perm entries alike.

The conv's weight loses its height axis, its strides, dilations and custom pads their height
entries; bias, groups and pad_type stay. A constant added after the squeeze is not the conv's:
fuse_conv_bias folds it once this pass has run (through the transpose, for pattern 2). Not
taken: a kernel higher than one, pads along the height (the conv would read a padded row), a
weight that is not a plain constant (a compressed one keeps its layout), a dummy axis or a perm
other than the pattern's, an intermediate read elsewhere (or a function output).

Not in the default pipeline: the conv as written computes on (B, C, 1, S), the layout the ANE
runs a convolution in (docs/passes.md, matmul_to_conv), and a rank-3 conv is the layout it is not;
it runs when named, as coremltools runs it for its own converters."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored, wide

_FIRST_AXIS = 2  # the dummy height of (B, C, 1, S)
_LAST_AXIS = 1  # the dummy height of (B, 1, S, C)
_TO_CHANNELS_FIRST = (0, 3, 1, 2)  # (B, 1, S, C) -> (B, C, 1, S)
_TO_CHANNELS_LAST = (0, 2, 3, 1)  # (B, C, 1, S) -> (B, 1, S, C)


def _ints(op: Operation, arg: str) -> list[int] | None:
    return (
        None
        if arg not in op.inputs
        else [int(v) for v in np.asarray(stored(op.var(arg))).reshape(-1)]
    )


def _one_axis(op: Operation, axis: int) -> bool:
    """Whether a squeeze or expand_dims names `axis` of a rank-4 tensor, alone."""
    axes = _ints(op, "axes")
    return axes is not None and len(axes) == 1 and axes[0] % 4 == axis


def _perm(op: Operation, perm: tuple[int, ...]) -> bool:
    given = _ints(op, "perm")
    return given is not None and tuple(p % 4 for p in given) == perm


def _made_by(edit: Editor, var: Var, op_type: str, reader: Operation) -> Operation | None:
    """The op making `var`, when it is an `op_type` and `reader` alone reads `var`."""
    op = var.op
    if op is None or op.type != op_type or edit.sole_reader(var) is not reader:
        return None
    return op


def _kernel(conv: Operation) -> tuple[np.ndarray, list[int] | None] | None:
    """The weight (in float64) and the custom pads of a conv one high that reads no padded row,
    else None (a weight that is not a plain const too)."""
    weight = wide(conv.var("weight"))
    if weight is None or weight.ndim != 4 or weight.shape[2] != 1:
        return None
    pad_type = stored(conv.var("pad_type")) if "pad_type" in conv.inputs else "valid"
    pad = _ints(conv, "pad") if pad_type == "custom" else None
    if pad is not None and (pad[0] or pad[1]):
        return None
    return weight, pad


def _conv1d(
    edit: Editor,
    conv: Operation,
    kernel: tuple[np.ndarray, list[int] | None],
    x: Var,
    anchor: Operation,
    name: str,
    out: str,
) -> Operation:
    """The rank-3 conv of x that `conv` computes on x with a dummy height, placed before
    `anchor` with its new consts."""
    weight, pad = kernel
    args: dict = {"x": x}
    dtype = conv.var("weight").tensor.dtype
    args["weight"] = edit.const(f"{anchor.name}_weight", weight[:, :, 0, :], dtype, anchor)
    for arg in ("bias", "groups", "pad_type"):
        if arg in conv.inputs:
            args[arg] = conv.inputs[arg]
    for arg in ("strides", "dilations"):
        given = _ints(conv, arg)
        if given is not None:
            tail = np.array(given[1:], np.int32)
            args[arg] = edit.const(f"{anchor.name}_{arg}", tail, DType.INT32, anchor)
    if pad is not None:
        tail = np.array(pad[2:], np.int32)
        args["pad"] = edit.const(f"{anchor.name}_pad", tail, DType.INT32, anchor)
    return edit.op("conv", name, args, anchor, out=[out])


def _channels_first(edit: Editor, squeeze: Operation) -> bool:
    """Pattern 1: expand_dims(axis 2) -> conv -> squeeze(axis 2)."""
    conv = _made_by(edit, squeeze.var("x"), "conv", squeeze)
    if conv is None or not _one_axis(squeeze, _FIRST_AXIS):
        return False
    expand = _made_by(edit, conv.var("x"), "expand_dims", conv)
    if expand is None or not _one_axis(expand, _FIRST_AXIS):
        return False
    x: Var = expand.var("x")
    kernel = _kernel(conv)
    if x.tensor.rank != 3 or kernel is None:
        return False
    out = squeeze.outputs[0]
    new = _conv1d(edit, conv, kernel, x, squeeze, squeeze.name, out.name)
    edit.replace(out, new.outputs[0])
    edit.drop(squeeze, conv, expand)
    return True


def _channels_last(edit: Editor, squeeze: Operation) -> bool:
    """Pattern 2: expand_dims(axis 1) -> transpose to (B, C, 1, S) -> conv -> transpose back to
    (B, 1, S, C) -> squeeze(axis 1)."""
    back = _made_by(edit, squeeze.var("x"), "transpose", squeeze)
    if back is None or not _one_axis(squeeze, _LAST_AXIS) or not _perm(back, _TO_CHANNELS_LAST):
        return False
    conv = _made_by(edit, back.var("x"), "conv", back)
    if conv is None:
        return False
    there = _made_by(edit, conv.var("x"), "transpose", conv)
    if there is None or not _perm(there, _TO_CHANNELS_FIRST):
        return False
    expand = _made_by(edit, there.var("x"), "expand_dims", there)
    if expand is None or not _one_axis(expand, _LAST_AXIS):
        return False
    x: Var = expand.var("x")
    kernel = _kernel(conv)
    if x.tensor.rank != 3 or kernel is None:
        return False
    # named as the ops they stand for: the transposes, the conv
    swap = edit.const(f"{squeeze.name}_perm", np.array([0, 2, 1], np.int32), DType.INT32, squeeze)
    first = edit.op(
        "transpose", there.name, {"x": x, "perm": swap}, squeeze, out=[there.outputs[0].name]
    )
    made = _conv1d(edit, conv, kernel, first.outputs[0], squeeze, conv.name, conv.outputs[0].name)
    out = squeeze.outputs[0]
    last = edit.op(
        "transpose", squeeze.name, {"x": made.outputs[0], "perm": swap}, squeeze, out=[out.name]
    )
    edit.replace(out, last.outputs[0])
    edit.drop(squeeze, back, conv, there, expand)
    return True


def run(edit: Editor, options: Options) -> None:
    for squeeze in edit.ops("squeeze"):
        if not _channels_first(edit, squeeze):
            _channels_last(edit, squeeze)


PASS = GraphPass(
    "compose_conv1d",
    "optimize_conv",
    "expand_dims -> conv (kernel one high) -> squeeze, channels first or through the "
    "channels-last transposes, becomes a conv of the rank-3 input",
    run,
    needs=frozenset({"squeeze"}),
)
