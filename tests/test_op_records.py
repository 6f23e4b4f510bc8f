"""The op records (app/mil/ops): a primitive is one record, found everywhere from that alone; no
module outside the records and app/coreai keeps a table of primitive names; and the facts the
records took over keep their sources."""

from __future__ import annotations

import ast
import importlib
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from records_support import extended

from app.artifacts import prepare, zip_bytes
from app.catalog_info import primitive_catalog
from app.coreai.coverage import coverage
from app.errors import RequestError
from app.estimates.work import build_works
from app.graphs.primitives import resolve_op
from app.kernels import CATALOG
from app.mil import emit_text, ops, parse_text
from app.mil.ops import AneFacts, AneStatus, Arg, Family, Form, GraphUse, OpRecord, Trait
from app.mil.types import FLOATS
from app.packaging import plan_weights
from app.reference import Executor
from app.request import KernelRequest

SOURCE = "tests/test_op_records.py (a toy)"
TOY = OpRecord(
    "toy_cube",
    Family.ELEMENTWISE,
    Form({"x": Arg("T")}, lambda call: [call.type("x")], {"T": FLOATS}),
    meaning=lambda a: a.f32("x") ** 3,
    traits=frozenset({Trait.ELEMENTWISE, Trait.UNARY, Trait.NONLINEAR}),
    graph=GraphUse("x³", 4 * 2.0**-11),
    ane=AneFacts(AneStatus.REPORTED_FAILING, "no chip was ever asked to cube", SOURCE),
    flops=lambda op: 3 * op.outputs[0].tensor.size,
)
WIDTH = 100  # 100 % 128 > 64: a square feeding a nonlinearity is reported failing to fuse
GRAPH = {
    "inputs": {"x": {"shape": [1, 4, 1, WIDTH]}},
    "nodes": [
        {"id": "sq", "op": "square", "inputs": {"x": "x"}},
        {"id": "cube", "op": "toy_cube", "inputs": {"x": "sq"}},
    ],
    "outputs": {"y": "cube"},
}


def test_a_primitive_is_one_record_and_found_everywhere():
    with extended(TOY):
        request = KernelRequest.create(graph=GRAPH, format="mil", name="toy", verify=True)
        prepared = prepare(request, random_seed=0)
        # the graph API: the request builds, and verifies against the record's float64 meaning
        assert prepared.verified
        assert "toy_cube" in {p["name"] for p in primitive_catalog()}
        program = prepared.build.program
        assert [op.type for op in program.main.operations] == ["square", "toy_cube"]
        # the reference executor runs the record's meaning, stored in fp16
        x = np.random.default_rng(1).standard_normal((1, 4, 1, WIDTH)).astype(np.float16)
        y = Executor(program).run({"x": x}).outputs["y"]
        cubed = np.square(x.astype(np.float32)).astype(np.float16).astype(np.float32) ** 3
        np.testing.assert_array_equal(y, cubed.astype(np.float16))
        # the preflight: its ANE facts, with their source, and its traits (nonlinear)
        found = {f.rule: f for f in prepared.findings}
        assert found["op.reported-failing"].source == SOURCE
        assert "no chip was ever asked to cube" in found["op.reported-failing"].message
        assert "toy_cube 'cube'" in found["square.fused-nonlinearity"].message
        # the estimate: its cost
        (work,), _ = build_works(prepared.build)
        assert work.flops == 4 * WIDTH + 3 * 4 * WIDTH  # square: one per element; the toy: 3
        # the model.mil printer and parser: text -> IR -> text is identical
        with zipfile.ZipFile(io.BytesIO(zip_bytes(prepared))) as zf:
            (path,) = [n for n in zf.namelist() if n.endswith("model.mil")]
            text = zf.read(path).decode()
        assert " = toy_cube(x = sq)" in text
        parsed = parse_text(text).program
        _, offsets = plan_weights(parsed)  # no weights: the same (empty) plan for both
        info = {"coremltools-version": "9.0", "ane-kernels-version": "0.1.0"}
        assert emit_text(parsed, offsets, info) == emit_text(program, offsets, info)
        # the Core AI coverage report: listed, with no translation and no reason yet
        (row,) = [c for c in coverage() if c.op == "toy_cube"]
        assert not row.translates and row.how == ""
    # and gone again after
    assert ops.get("toy_cube") is None and all(c.op != "toy_cube" for c in coverage())
    with pytest.raises(RequestError, match="neither a catalog op nor an allowed MIL primitive"):
        resolve_op("toy_cube", "nodes[1].op")


def test_an_op_recorded_twice_is_refused():
    with extended(OpRecord("add", Family.ELEMENTWISE)), pytest.raises(ValueError, match="add"):
        ops.get("add")


# -- no table of primitive names outside the records and app/coreai ----------------------------
APP = REPO / "app"
OWNERS = (APP / "mil" / "ops", APP / "coreai")  # the records, and Core AI's own spelling
AT_MOST = 2  # a check may name one or two ops; three make a table


def _modules() -> Iterator[Path]:
    for path in sorted(APP.rglob("*.py")):
        if not any(path.is_relative_to(owner) for owner in OWNERS):
            yield path


def _names() -> set[str]:
    """The primitives' names, less those catalog ops share (conv, matmul, identity, read_state):
    a table keyed by them is the catalog's, a table of its own ops."""
    return {r.name for r in ops.records()} - set(CATALOG)


def _named(values, names: set[str]) -> list[str]:
    return [v for v in values if isinstance(v, str) and v in names]


def test_no_literal_table_of_primitive_names_outside_the_records():
    names, tables = _names(), []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                elements = node.keys
            elif isinstance(node, ast.Set | ast.Tuple | ast.List):
                elements = node.elts
            else:
                continue
            constants = [e.value for e in elements if isinstance(e, ast.Constant)]
            if len(found := _named(constants, names)) > AT_MOST:
                tables.append(f"{path.relative_to(REPO)}:{node.lineno} {found}")
    assert tables == [], "per-op tables belong in the op records (app/mil/ops): " + "; ".join(
        tables
    )


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_constant_keyed_by_primitive_names_outside_the_records():
    """Tables made at import time (comprehensions, calls) as well as written ones."""
    names, tables = _names(), []
    for path in _modules():
        name = _module_name(path)
        if name == "app.main" or name.endswith(".__main__"):  # importing them runs them
            continue
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr == "__builtins__":  # Python's own: abs, pow and round are op names too
                continue
            if not isinstance(value, dict | set | frozenset | tuple | list):
                continue
            members = list(value)  # a dict's keys
            if len(found := _named(members, names)) > AT_MOST:
                tables.append(f"{name}.{attr} {found}")
    assert tables == [], "per-op tables belong in the op records (app/mil/ops): " + "; ".join(
        tables
    )


# -- the records themselves ------------------------------------------------------------------
def test_every_built_op_has_a_meaning_and_every_record_one_module_of_its_family():
    assert all(r.meaning is not None for r in ops.built())
    listed: dict[str, str] = {}
    for path in sorted((APP / "mil" / "ops").glob("*.py")):
        module = importlib.import_module(f"app.mil.ops.{path.stem}")
        if path.stem == "__init__" or not hasattr(module, "RECORDS"):
            continue
        for record in module.RECORDS:
            assert record.family is module.F, (path.stem, record.name)
            assert listed.setdefault(record.name, path.stem) == path.stem, record.name
    assert sorted(listed) == sorted(r.name for r in ops.records())


def test_every_ane_fact_but_supported_has_a_reason_and_a_source():
    for record in ops.records():
        facts = record.ane
        reported = facts.status is not AneStatus.SUPPORTED
        assert bool(facts.reason) == bool(facts.source), record.name
        assert facts.reason or not reported, record.name
        # a supported op with a source is one a report ran; without, nobody reported on it
        assert (facts.reported == "no report") == (not reported and not facts.source)


def test_graph_primitives_are_built_ops():
    assert all(r.form is not None for r in ops.records() if r.graph is not None)
