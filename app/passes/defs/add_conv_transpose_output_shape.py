"""add_conv_transpose_output_shape: a conv_transpose without `output_shape` is given the shape its
type inference found, as a const (every shape here is known when the program is built): the
output's shape is then written in the program, not left to the runtime to infer."""

from __future__ import annotations

import numpy as np

from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("conv_transpose"):
        if "output_shape" in op.inputs:
            continue
        shape = np.array(op.outputs[0].tensor.shape)
        args = dict(op.inputs)
        args["output_shape"] = edit.const(f"{op.name}_output_shape", shape, DType.INT32, op)
        edit.swap(op, "conv_transpose", args)


PASS = GraphPass(
    "add_conv_transpose_output_shape",
    "optimize_conv",
    "a conv_transpose is given its output_shape",
    run,
    needs=frozenset({"conv_transpose"}),
)
