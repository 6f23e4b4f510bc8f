"""A compressed weight as ops of a program being built: consts and the constexpr op(s) over them.

The last op is named `name` and is the weight's var; its consts are `<op>_<argument>`, the names
the text parser and the protobuf loader give the values they read inside a constexpr op, so a
program read back has the same names. The first of a chained pair is `<name>_sparse`.
"""

from __future__ import annotations

from typing import Any

from app.mil.builder import Builder
from app.mil.ir import Var
from app.quantize.result import Compressed


def add_compressed(builder: Builder, name: str, compressed: Compressed) -> Var:
    """Adds the consts and constexpr op(s) of `compressed`; returns the decompressed weight."""
    outputs: list[Var] = []
    for index, step in enumerate(compressed.ops):
        op_name = name if index == len(compressed.ops) - 1 else f"{name}_sparse"
        args: dict[str, Any] = {arg: outputs[i] for arg, i in step.chained.items()}
        for arg in sorted(step.params):  # sorted: the order a reader makes them in
            param = step.params[arg]
            args[arg] = builder.const(builder.unique(f"{op_name}_{arg}"), param.array, param.dtype)
        outputs = list(builder.op_outputs(step.op_type, op_name, **args))
    return outputs[0]
