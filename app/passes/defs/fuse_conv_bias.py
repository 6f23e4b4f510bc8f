"""fuse_conv_bias: a constant added to (or subtracted from) a convolution's output becomes its
bias, when the constant is one number per output channel (shaped (C,1,1), (1,C,1,1), a scalar,
...: its broadcast leaves the output's shape as it is). Also through a transpose between them
(conv -> transpose -> add: the channel axis is where the transpose puts it). A constant minus
the conv negates the weight too, so the weight must then be a plain const."""

from __future__ import annotations

from app.mil.ir import Operation, Var
from app.passes.conv_parts import bias_of, fold_into, remade, weight_of
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import fits, operands, per_channel, wide


def _fold(edit: Editor, conv: Operation, moved: Operation | None, op: Operation, via: Var) -> bool:
    """Fold `op` (add/sub of a constant reading `via`, conv's output or its transpose) into the
    conv; `moved` is the transpose between them."""
    other = operands(op, via)
    value = None if other is None else wide(other)
    if value is None or op.outputs[0].type != via.type:
        return False
    axis = 1
    if moved is not None:
        given = wide(moved.var("perm"))
        if given is None:  # not a const
            return False
        perm = [int(p) % via.tensor.rank for p in given]
        axis = perm.index(1)
    vector = per_channel(value, via.tensor.shape, axis)
    bias = bias_of(conv)
    if vector is None or bias is None:
        return False
    weight = None
    if op.type == "add":
        bias = bias + vector
    elif op.var("x") is via:  # conv - c
        bias = bias - vector
    else:  # c - conv: the conv negated
        weight = weight_of(conv)
        if weight is None:
            return False
        weight, bias = -weight, vector - bias
    if not fits(bias, conv.var("weight")):
        return False
    if moved is None:
        fold_into(edit, conv, op, weight, bias)
        return True
    out = op.outputs[0]
    inner = remade(
        edit, conv, op, edit.fresh(conv.name), edit.fresh(conv.outputs[0].name), weight, bias
    )
    new = edit.op("transpose", op.name, {**moved.inputs, "x": inner.outputs[0]}, op, out=[out.name])
    edit.replace(out, new.outputs[0])
    edit.drop(op, moved, conv)
    return True


def run(edit: Editor, options: Options) -> None:
    edit.repeat(_sweep)  # the conv a fusion makes may be followed by another such op


def _sweep(edit: Editor) -> bool:
    fused = False
    for conv in edit.ops("conv"):
        reader = edit.sole_reader(conv.outputs[0])
        if reader is None:
            continue
        if reader.type in ("add", "sub"):
            fused |= _fold(edit, conv, None, reader, conv.outputs[0])
        elif reader.type == "transpose":
            after = edit.sole_reader(reader.outputs[0])
            if after is not None and after.type in ("add", "sub"):
                fused |= _fold(edit, conv, reader, after, reader.outputs[0])
    return fused


PASS = GraphPass(
    "fuse_conv_bias",
    "optimize_conv",
    "a per-channel constant added to a conv's output becomes its bias",
    run,
    needs=frozenset({"conv"}),
)
