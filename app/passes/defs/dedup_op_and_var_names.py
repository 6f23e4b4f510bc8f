"""dedup_op_and_var_names: an op or a value named like an earlier one (op names and value names
are counted apart, as in MIL) takes a fresh name, `<name>_1`, `<name>_2`, ... The function's
inputs and outputs keep theirs: another holder of an output's name is the one renamed.

A program this service builds has unique names already (the builder refuses a second one); a
program read from elsewhere (an importer, a parsed model.mil) may not."""

from __future__ import annotations

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def _fresh(name: str, taken: set[str]) -> str:
    i = 1
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


def run(edit: Editor, options: Options) -> None:
    fn = edit.fn
    kept = {v.name for v in fn.inputs} | {v.name for v in fn.outputs}
    every_var = kept | {v.name for op in fn.operations for v in op.outputs}
    every_op = {op.name for op in fn.operations}
    seen_vars = {v.name for v in fn.inputs}
    seen_ops: set[str] = set()
    outputs = set(fn.outputs)
    for op in fn.operations:
        if op.name in seen_ops:
            edit.rename(op, _fresh(op.name, every_op))
            every_op.add(op.name)
        seen_ops.add(op.name)
        for var in op.outputs:
            if var.name in seen_vars or (var.name in kept and var not in outputs):
                edit.rename(var, _fresh(var.name, every_var))
                every_var.add(var.name)
            seen_vars.add(var.name)


PASS = GraphPass(
    "dedup_op_and_var_names",
    "cleanup",
    "renames ops and values that repeat an earlier name, keeping input and output names",
    run,
)
