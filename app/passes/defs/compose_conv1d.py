"""compose_conv1d: expand_dims(x, axes=[2]) -> conv with a kernel one high -> squeeze(axes=[2])
(how TensorFlow's Conv1D, and some PyTorch backends, spell a 1-D convolution) becomes one conv
of the rank-3 x (the seed's pattern 1; axes -2 alike). The conv's weight loses its height axis,
its strides, dilations and custom pads their height entries; bias and groups stay. Not taken:
a kernel higher than one, pads along the height (the conv would read a padded row), a weight that
is not a plain constant (a compressed one keeps its layout), an intermediate read elsewhere.

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


def _height_axis(op: Operation, rank: int) -> bool:
    """Whether a squeeze or expand_dims names axis 2 of a rank-`rank` tensor, alone."""
    if "axes" not in op.inputs:
        return False
    axes = np.asarray(stored(op.var("axes"))).reshape(-1)
    return len(axes) == 1 and int(axes[0]) % rank == 2


def _ints(op: Operation, arg: str) -> list[int] | None:
    return (
        None
        if arg not in op.inputs
        else [int(v) for v in np.asarray(stored(op.var(arg))).reshape(-1)]
    )


def run(edit: Editor, options: Options) -> None:
    for squeeze in edit.ops("squeeze"):
        made: Var = squeeze.var("x")
        conv = made.op
        if conv is None or conv.type != "conv" or edit.sole_reader(made) is not squeeze:
            continue
        expanded: Var = conv.var("x")
        expand = expanded.op
        if expand is None or expand.type != "expand_dims" or edit.sole_reader(expanded) is not conv:
            continue
        x: Var = expand.var("x")
        if x.tensor.rank != 3 or not _height_axis(expand, 4) or not _height_axis(squeeze, 4):
            continue
        w: Var = conv.var("weight")
        weight = wide(w)
        if weight is None or weight.ndim != 4 or weight.shape[2] != 1:
            continue
        pad_type = stored(conv.var("pad_type")) if "pad_type" in conv.inputs else "valid"
        pad = _ints(conv, "pad") if pad_type == "custom" else None
        if pad is not None and (pad[0] or pad[1]):
            continue
        out = squeeze.outputs[0]
        args: dict = {"x": x}
        args["weight"] = edit.const(
            f"{squeeze.name}_weight", weight[:, :, 0, :], w.tensor.dtype, squeeze
        )
        for arg in ("bias", "groups", "pad_type"):
            if arg in conv.inputs:
                args[arg] = conv.inputs[arg]
        for arg in ("strides", "dilations"):
            given = _ints(conv, arg)
            if given is not None:
                args[arg] = edit.const(
                    f"{squeeze.name}_{arg}", np.array(given[1:], np.int32), DType.INT32, squeeze
                )
        if pad is not None:
            args["pad"] = edit.const(
                f"{squeeze.name}_pad", np.array(pad[2:], np.int32), DType.INT32, squeeze
            )
        new = edit.op("conv", squeeze.name, args, squeeze, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(squeeze, conv, expand)


PASS = GraphPass(
    "compose_conv1d",
    "optimize_conv",
    "expand_dims -> conv (kernel one high) -> squeeze becomes a conv of the rank-3 input",
    run,
    needs=frozenset({"squeeze"}),
)
