"""Running a pipeline over a program: on a copy, every function, pass by pass, the result
checked (every op reads values made before it, names are unique, and the function's inputs and
outputs keep their names, shapes and dtypes; once at the end, and after every pass when that
finds a fault, to name the pass), and what each pass changed recorded."""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass
from typing import Any

from app.mil.ir import Function, Operation, Program
from app.passes.edit import Editor, copy_program
from app.passes.pipelines import Pipeline


class PassError(RuntimeError):
    """A pass broke the program it rewrote: a fault of the pass, never of the request."""


@dataclass(frozen=True)
class Change:
    """What one pass changed in one function: the ops it removed and added (type, name); else
    whether it reordered them, or else rewired what ops read (prefer_state_in_downstream: no op
    more or less, in the same order)."""

    graph_pass: str
    function: str
    removed: tuple[tuple[str, str], ...]
    added: tuple[tuple[str, str], ...]
    reordered: bool
    rewired: bool = False

    def to_json(self, *, function: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "pass": self.graph_pass,
            "removed": _by_type(self.removed),
            "added": _by_type(self.added),
        }
        if self.reordered:
            doc["reordered"] = True
        if self.rewired:
            doc["rewired"] = True
        if function:
            doc["function"] = self.function
        return doc


def _by_type(ops: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op_type, name in ops:
        out.setdefault(op_type, []).append(name)
    return out


@dataclass(frozen=True)
class PassReport:
    """kernel.json's `passes`: the pipeline, and per pass that changed something what it did."""

    pipeline: Pipeline
    changes: tuple[Change, ...]
    ops_before: int
    ops_after: int

    def to_json(self) -> dict[str, Any]:
        several = len({c.function for c in self.changes}) > 1
        return {
            **self.pipeline.key_json(),
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "changes": [c.to_json(function=several) for c in self.changes],
        }


def run_pipeline(program: Program, pipeline: Pipeline) -> tuple[Program, PassReport]:
    """The program after the pipeline (a copy: `program` is left as it was) and the report."""
    if not pipeline.steps:
        return program, PassReport(pipeline, (), *(_count(program),) * 2)
    # The passes make and drop many small objects, and the collector's full sweeps over a
    # service's heap would cost more than the passes (measured: about half the time at 1,000
    # nodes); the cycles a pass leaves (an op and its outputs) are collected when it ends.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _run(program, pipeline)
    finally:
        if paused:
            gc.enable()


def _count(program: Program) -> int:
    return sum(len(fn.operations) for fn in program.functions.values())


def _run(
    program: Program, pipeline: Pipeline, *, check_each: bool = False
) -> tuple[Program, PassReport]:
    result = copy_program(program)
    # A pass rewrites one function and reads no other: each function goes through the whole
    # pipeline in turn, and the report lists the changes step by step, as the pipeline runs.
    found: list[tuple[int, int, Change]] = []  # (step, function, what changed)
    for order, (name, fn) in enumerate(result.functions.items()):
        given = program.functions[name]
        if check_each:
            _rewrite(name, fn, given, result, pipeline, order, found, check_each)
            continue
        # Checked once, at the end. When broken, or when a pass failed (it may have been handed
        # what an earlier pass broke), the pipeline runs again checking after every pass, to
        # name the pass at fault (the passes are deterministic: the same one breaks it again).
        try:
            if _rewrite(name, fn, given, result, pipeline, order, found, check_each):
                _check(fn, given, "")
        except Exception:
            return _run(program, pipeline, check_each=True)
    found.sort(key=lambda f: (f[0], f[1]))
    changes = tuple(change for _, _, change in found)
    return result, PassReport(pipeline, changes, _count(program), _count(result))


def _rewrite(
    name: str,
    fn: Function,
    given: Function,
    result: Program,
    pipeline: Pipeline,
    order: int,
    found: list[tuple[int, int, Change]],
    check_each: bool,
) -> bool:
    """`fn` through the pipeline (what changed added to `found`); whether any pass changed it."""
    # one editor for the whole pipeline: it keeps who reads what as the passes edit
    edit = Editor(fn, result.target)
    # A pass is a function of the function it rewrites and its options: one that changed nothing
    # changes nothing again until another pass changes the function. The function counts its
    # changes, and a step whose pass (with the same options) last left this count as it is, is
    # skipped: the cleanup passes the pipeline repeats cost one walk, not three, on a program
    # they leave as it is (a catalog kernel's, a kit's).
    changes = 0
    idle = [-1] * len(pipeline.steps)  # by a step's first twin: the count its pass last left
    for index, (step, twin) in enumerate(zip(pipeline.steps, pipeline.same_as, strict=True)):
        graph_pass = step.graph_pass
        if idle[twin] == changes or (graph_pass.needs and not edit.has(graph_pass.needs)):
            continue
        edit.changed = edit.rewired = False
        edit.renewed = {}
        before = list(fn.operations)
        graph_pass.run(edit, step.options)
        edit.commit()
        if not edit.changed:
            idle[twin] = changes
            continue
        changes += 1
        if check_each:
            _check(fn, given, graph_pass.name)
        change = _change(graph_pass.name, name, before, fn.operations, edit.rewired, edit.renewed)
        if change is not None:
            found.append((index, order, change))
    return changes > 0


def _change(
    name: str,
    function: str,
    before: list[Operation],
    after: list[Operation],
    rewired: bool,
    renewed: dict[Operation, tuple[str, str]],
) -> Change | None:
    """What the pass changed; an op it renewed in place counts as removed (as it was) and added
    (as it is), as an op it replaced."""
    kept, now = set(before), set(after)
    removed = tuple(
        renewed.get(op) or (op.type, op.name) for op in before if op not in now or op in renewed
    )
    added = tuple((op.type, op.name) for op in after if op not in kept or op in renewed)
    reordered = not removed and not added and before != after
    if not (removed or added or reordered):
        return Change(name, function, (), (), False, True) if rewired else None
    return Change(name, function, removed, added, reordered)


def _signature(fn: Function) -> tuple:
    return tuple((v.name, v.type) for v in fn.inputs), tuple((v.name, v.type) for v in fn.outputs)


def _repeated(fn: Function) -> list[str]:
    """Names an op or a value repeats (op names and value names are counted apart, as in MIL;
    the builder keeps them apart from each other too, except an op and its own output)."""
    ops = Counter(op.name for op in fn.operations)
    values = Counter(
        [v.name for v in fn.inputs] + [v.name for op in fn.operations for v in op.outputs]
    )
    return sorted({n for n, k in ops.items() if k > 1} | {n for n, k in values.items() if k > 1})


def _check(fn: Function, given: Function, pass_name: str) -> None:
    """That `fn`, rewritten from `given`, reads every value after it is made, keeps the
    signature, and holds names unique where `given` did (a program read from elsewhere may
    repeat one until dedup_op_and_var_names runs)."""

    def fail(message: str) -> PassError:
        return PassError(f"graph pass {pass_name} broke function {fn.name!r}: {message}")

    if _signature(fn) != _signature(given):
        raise fail("its inputs or outputs changed name, shape or dtype")
    made = set(fn.inputs)
    for op in fn.operations:
        for value in op.inputs.values():
            for v in value if isinstance(value, tuple) else (value,):
                if v not in made:
                    raise fail(f"op {op.name!r} reads {v.name!r} before it is made")
        made.update(op.outputs)
    if (twice := _repeated(fn)) and not _repeated(given):
        raise fail(f"names used twice: {twice[:5]}")
    if not all(v in made for v in fn.outputs):
        raise fail("an output is made by no op")
