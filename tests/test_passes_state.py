"""coreml_update_state (coremltools' Core ML dialect: a write to a state that returns the value
written) and the pass that reads it, prefer_state_in_downstream: the seed's example on the IR (a
graph request holds no states) and its near-misses; the record's type rule and meaning; the
program's text and protobuf hold it as coremltools' backend writes it (write_state, then
read_state), which coremltools' own loader reads back as coreml_update_state; Apple's Core AI
runtime runs it."""

from __future__ import annotations

import numpy as np
import pytest

from app.mil import Builder, DType, emit_text, parse_text
from app.mil.ir import MILBuildError
from app.mil.to_proto import emit_proto
from app.packaging import plan_weights
from app.passes import DEFAULT, parse_passes, resolve, run_pipeline
from app.reference.executor import Executor, random_inputs

INFO = {"coremltools-version": "9.0", "ane-kernels-version": "0.1.0"}
ONES = np.ones((1, 4), np.float16)


def _run(program, *names: str):
    return run_pipeline(program, resolve(parse_passes(list(names))))


def _seed(*, reader_before: bool = False, only_updates: bool = False, as_output: bool = False):
    """The seed's mul = mul(state, x); update = coreml_update_state(state, mul); add = add(mul,
    y), the state read first (read_state: the IR's mul takes tensors). `reader_before`: an op
    reading mul listed before the update (a read of the state between keeps the update where it
    is); `only_updates`: mul read by the update and by an update of another state only;
    `as_output`: mul is a function output too."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    y = b.input("y", DType.FP16, (1, 4))
    state = b.state("state", DType.FP16, (1, 4))
    held = b.op("read_state", "held", input=state)
    mul = b.op("mul", "mul", x=held, y=x)
    outputs = []
    if reader_before:
        early = b.op("sub", "early", x=mul, y=b.op("read_state", "peek", input=state))
        outputs.append(early)
    update = b.op("coreml_update_state", "update", state=state, value=mul)
    if only_updates:
        other = b.state("other", DType.FP16, (1, 4))
        b.op("coreml_update_state", "copy", state=other, value=mul)
        outputs.append(b.op("add", "add", x=update, y=y))
    else:
        outputs.append(b.op("add", "add", x=mul, y=y))
    if as_output:
        outputs.append(mul)
    return b.build(outputs)


def _agree(before, after) -> None:
    """The same outputs and the same states after one call, from the same inputs and states."""
    inputs = random_inputs(before.main, 0)
    runs = []
    for program in (before, after):
        states = {v.name: ONES * 3 for v in program.main.inputs if v.type != v.tensor}
        run = Executor(program, states=states)
        runs.append((run.run(dict(inputs)).outputs, states))
    (out0, states0), (out1, states1) = runs
    assert set(out0) == set(out1) and all(np.array_equal(out0[k], out1[k]) for k in out0)
    assert all(np.array_equal(states0[k], states1[k]) for k in states0)


def _reads(program, name: str) -> list[str]:
    (op,) = [op for op in program.main.operations if op.name == name]
    return [
        v.name
        for value in op.inputs.values()
        for v in (value if isinstance(value, tuple) else (value,))
    ]


def test_prefer_state_in_downstream_the_seed_example():
    before = _seed()
    after, report = _run(before, "prefer_state_in_downstream")
    kinds = [op.type for op in after.main.operations]
    assert kinds == ["read_state", "mul", "coreml_update_state", "add"]  # the seed's after
    assert _reads(before, "add") == ["mul", "y"] and _reads(after, "add") == ["update", "y"]
    assert [c.graph_pass for c in report.changes] == ["prefer_state_in_downstream"]
    _agree(before, after)


def test_prefer_state_in_downstream_follows_canonicalize_inplace_pattern():
    """The update listed after its value's reader: canonicalize_inplace_pattern moves it up
    first (coremltools' order), then the reader reads the state back."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    state = b.state("state", DType.FP16, (1, 4))
    mul = b.op("mul", "mul", x=b.op("read_state", "held", input=state), y=x)
    add = b.op("add", "add", x=mul, y=x)
    b.op("coreml_update_state", "update", state=state, value=mul)
    before = b.build([add])
    _, report = _run(before, "prefer_state_in_downstream")
    assert not report.changes  # the reader comes first: it keeps the value
    after, report = _run(before, "canonicalize_inplace_pattern", "prefer_state_in_downstream")
    assert [op.name for op in after.main.operations] == ["held", "mul", "update", "add"]
    assert _reads(after, "add") == ["update", "x"]
    assert [c.graph_pass for c in report.changes] == [
        "canonicalize_inplace_pattern",
        "prefer_state_in_downstream",
    ]
    _agree(before, after)
    default, _ = run_pipeline(before, resolve(parse_passes("default")))
    assert _reads(default, "add") == ["update", "x"]
    _agree(before, default)


@pytest.mark.parametrize(
    "made",
    [
        {"only_updates": True},  # read otherwise only by another update: nothing to gain
        {"as_output": True},  # a function output stays the value it names
    ],
    ids=["only-updates", "output"],
)
def test_prefer_state_in_downstream_leaves(made):
    before = _seed(**made)
    after, report = _run(before, "prefer_state_in_downstream")
    if made.get("as_output"):  # the add after the update is redirected; the output is not
        assert _reads(after, "add") == ["update", "y"]
        assert [v.name for v in after.main.outputs] == ["add", "mul"]
    else:
        assert not report.changes
    _agree(before, after)


def test_prefer_state_in_downstream_keeps_a_reader_before_the_update():
    before = _seed(reader_before=True)
    after, _ = _run(before, "canonicalize_inplace_pattern", "prefer_state_in_downstream")
    # a read of the state between the mul and the update: the update stays after it, and so
    # the sub before it keeps reading mul; the add after it reads the state back
    assert _reads(after, "early") == ["mul", "peek"]
    assert _reads(after, "add") == ["update", "y"]
    _agree(before, after)


def test_prefer_state_in_downstream_is_in_the_default_pipeline_after_canonicalize():
    assert DEFAULT.index("prefer_state_in_downstream") == (
        DEFAULT.index("canonicalize_inplace_pattern") + 1
    )


# -- the record ------------------------------------------------------------------------------
def test_coreml_update_state_takes_the_states_type_and_an_ios18_program():
    b = Builder("ios18")
    x = b.input("x", DType.FP32, (1, 4))
    state = b.state("state", DType.FP16, (1, 4))
    with pytest.raises(MILBuildError, match="does not match the state"):
        b.op("coreml_update_state", "u", state=state, value=x)
    older = Builder("ios17")
    x = older.input("x", DType.FP16, (1, 4))
    with pytest.raises(MILBuildError):
        older.op("coreml_update_state", "u", state=x, value=x)


def test_coreml_update_state_writes_the_state_and_returns_the_value():
    program = _seed()
    states = {"state": ONES * 3}
    x, y = ONES * 2, ONES * 5
    out = Executor(program, states=states).run({"x": x, "y": y}).outputs["add"]
    assert np.array_equal(states["state"], ONES * 6)  # 3 · 2 written
    assert np.array_equal(out, ONES * 11)


def test_its_text_is_write_state_then_read_state_as_coremltools_writes_it():
    program = _seed(only_updates=True)  # "copy": an update nothing reads
    _, offsets = plan_weights(program)
    text = emit_text(program, offsets, INFO)
    assert "coreml_update_state" not in text
    assert 'write_state(data = mul, input = state)[name = string("update_write_state")]' in text
    assert 'update = read_state(input = state)[name = string("update")]' in text
    assert 'name = string("copy_write_state")' in text
    assert 'string("copy")' not in text  # no read back of an update nothing reads
    parsed = parse_text(text).program
    assert [op.type for op in parsed.main.operations] == [
        "read_state",
        "mul",
        "write_state",
        "read_state",
        "write_state",
        "add",
    ]
    assert emit_text(parsed, offsets, INFO) == text
    _agree(program, parsed)


def test_its_write_state_takes_a_name_no_other_op_has():
    """An op named `<update>_write_state` already: the lowered write takes the next free name,
    so the program's ops keep distinct names."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    state = b.state("state", DType.FP16, (1, 4))
    taken = b.op("relu", "update_write_state", x=x)
    update = b.op("coreml_update_state", "update", state=state, value=taken)
    program = b.build([b.op("add", "add", x=update, y=x)])
    _, offsets = plan_weights(program)
    text = emit_text(program, offsets, INFO)
    assert 'name = string("update_write_state_1")' in text
    names = [op.name for op in parse_text(text).program.main.operations]
    assert len(names) == len(set(names)), names


def test_coremltools_reads_it_back_as_coreml_update_state(tmp_path):
    from coremltools.converters.mil.frontend.milproto.load import load

    program = _seed()
    _, offsets = plan_weights(program)
    model = emit_proto(program, offsets, INFO)
    loaded = load(
        model, specification_version=model.specificationVersion, file_weights_dir=str(tmp_path)
    )
    kinds = [op.op_type for op in loaded.functions["main"].operations]
    assert kinds == ["read_state", "mul", "coreml_update_state", "add"]


def test_apples_core_ai_runtime_runs_it():
    pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")
    from app.coreai import Call, aimodel_files, run_aimodel, translate

    program, _ = _run(_seed(), "prefer_state_in_downstream")
    inputs = {"x": ONES * 2, "y": ONES * 5}
    (result,) = run_aimodel(
        aimodel_files(translate(program)), [Call("main", inputs, {"state": ONES * 3})]
    ).results
    states = {"state": ONES * 3}
    want = Executor(program, states=states).run(inputs).outputs["add"]
    assert np.array_equal(result.outputs["add"], want)
    assert np.array_equal(result.states["state"], states["state"])
