"""Hostile graphs against a live server and in process: shapes, reps and axes checked as data
before arithmetic, MIL values range-checked against their type (no silent int32 wrap-around),
params of the wrong JSON type, and absurd shapes over the tensor ceilings: each a 4xx
problem+json naming the node or input, the server alive, its RSS flat, nothing left behind."""

from __future__ import annotations

import numpy as np
import pytest
from hostile_support import hostile_server
from http_support import assert_problem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.core.sizes import DEFAULT_PROGRAM_BYTES
from app.errors import RequestError
from app.graphs.build import build_graph
from app.graphs.primitives import primitives
from app.graphs.spec import GraphParams
from app.mil import Builder, DType, MILBuildError
from app.mil.ceilings import Ceilings
from app.mil.types import TensorType
from app.packaging.describe import to_json

BIG = 2**31 - 1


def one_node(shape: list[int], op: str, params: dict, dtype: str = "fp16") -> dict:
    return {
        "inputs": {"x": {"shape": shape, "dtype": dtype}},
        "nodes": [{"id": "n", "op": op, "inputs": {"x": "x"}, "params": params}],
        "outputs": {"y": "n"},
        "format": "mil",
    }


def split_of(params: dict) -> dict:
    """A split of a [1, 4, 8] input whose first output is the graph's."""
    body = one_node([1, 4, 8], "split", params)
    body["outputs"] = {"y": "n.0"}
    return body


# (what, body, status, field, words in the detail)
CASES = [
    (
        "tile reps 2^31-1 x4",
        one_node([1, 4, 1, 8], "tile", {"reps": [BIG] * 4}),
        422,
        "nodes[0]",
        "outside 0..2147483647",
    ),
    (
        "tile reps 2^32+2 wraps no more",
        one_node([1, 4, 1, 8], "tile", {"reps": [2**32 + 2, 1, 1, 1]}),
        422,
        "nodes[0]",
        "4294967298 is outside int32",
    ),
    (
        "tile reps nested",
        one_node([1, 4, 1, 8], "tile", {"reps": [[1, 2], [3]]}),
        422,
        "nodes[0]",
        "'reps'",
    ),
    (
        "tile reps an object",
        one_node([1, 4, 1, 8], "tile", {"reps": {"a": 1}}),
        422,
        "nodes[0]",
        "'reps'",
    ),
    ("tile reps 2^70", one_node([1, 4], "tile", {"reps": [2**70, 1]}), 422, "nodes[0]", "'reps'"),
    (
        "reshape to 2^31-1 squared",
        one_node([1, 256], "reshape", {"shape": [-1, BIG, BIG]}),
        422,
        "nodes[0]",
        "'shape'",
    ),
    (
        "reshape 2^32+1 wraps no more",
        one_node([1, 256], "reshape", {"shape": [2**32 + 1, 256]}),
        422,
        "nodes[0]",
        "4294967297 is outside int32",
    ),
    ("softmax axis 2^40", one_node([1, 4], "softmax", {"axis": 2**40}), 422, "nodes[0]", "'axis'"),
    ("softmax axis a list", one_node([1, 4], "softmax", {"axis": [[0]]}), 422, "nodes[0]", "axis"),
    (
        "reduce axes a string",
        one_node([1, 4], "reduce_sum", {"axes": "x"}),
        422,
        "nodes[0]",
        "axes",
    ),
    (
        "rsqrt epsilon past fp16",
        one_node([1, 4], "rsqrt", {"epsilon": 1e10}),
        422,
        "nodes[0]",
        "epsilon",
    ),
    (
        "split into 2^31-1 outputs",
        split_of({"axis": 2, "num_splits": BIG}),
        422,
        "nodes[0]",
        "more than 16384 outputs",
    ),
    (
        "split count a string",
        split_of({"axis": 2, "num_splits": "abc"}),
        422,
        "nodes[0]",
        "'num_splits'",
    ),
    (
        "split count an object",
        split_of({"axis": 2, "num_splits": {"a": 1}}),
        422,
        "nodes[0]",
        "'num_splits'",
    ),
    ("input [16384]*5", one_node([16384] * 5, "relu", {}), 413, "inputs.x", "per tensor"),
    (
        "input of 8 TiB",
        one_node([1, 16384, 16384, 16384], "relu", {}),
        413,
        "inputs.x",
        "per tensor",
    ),
    (
        "tile to 2^36 elements",
        one_node([1, 64, 64, 64], "tile", {"reps": [1, 256, 256, 16]}),
        413,
        "nodes[0]",
        "per tensor",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with hostile_server(tmp_path_factory.mktemp("hostile-graphs") / "data") as live:
        yield live


@pytest.mark.parametrize(
    ("what", "body", "status", "field", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_hostile_graphs_are_4xx_naming_the_node(server, what, body, status, field, words):
    with server.leaves_nothing():
        problem = assert_problem(server.client.post("/v1/graphs", json=body), status, field)
    assert words in problem["detail"], problem
    if status == 413:
        assert problem["limit"] > 0
    server.alive()


@pytest.mark.slow
def test_the_ceilings_are_settings(tmp_path):
    body = one_node([1, 64, 64, 64], "relu", {})
    with hostile_server(tmp_path / "data", max_tensor_elements="100000") as live:
        problem = assert_problem(live.client.post("/v1/graphs", json=body), 413, "inputs.x")
        assert problem["limit"] == 100000
        small = one_node([1, 64, 16, 16], "relu", {})
        assert live.client.post("/v1/graphs", json=small).status_code == 200


def test_the_default_ceilings_admit_real_models():
    ceilings = Ceilings()
    embedding = TensorType(DType.FP16, (128_256, 2048))
    assert ceilings.tensor(embedding, "const embed") == (128_256 * 2048, 128_256 * 2048 * 2)
    logits = TensorType(DType.FP16, (1, 4096, 128_256))
    ceilings.tensor(logits, "matmul logits")
    assert DEFAULT_PROGRAM_BYTES > 2 * 1_235_814_400  # Llama 3.2 1B's parameters in fp16


def test_a_wide_tile_within_the_ceilings_still_builds_and_describes():
    body = one_node([1, 4, 1, 8], "tile", {"reps": [2, 1, 1, 3]})
    del body["format"]
    build = build_graph(GraphParams.model_validate(body))
    (out,) = build.program.main.outputs
    assert out.tensor.shape == (2, 4, 1, 24)
    assert b"24" in to_json({"shape": list(out.tensor.shape)})


# -- property-based: random graphs never escape as anything but a refusal --------------------

hostile_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.integers(-4, 8),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=4),
        st.sampled_from(["EXACT", "valid", "same", "custom", "fp16", "int32"]),
    ),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=12,
)
shapes = st.lists(st.integers(1, 16384), min_size=1, max_size=5)


@st.composite
def random_graphs(draw) -> dict:
    """A chain of random primitives over one or two inputs, with random params of any JSON
    type and size."""
    names = ["a", "b"]
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        primitive = draw(st.sampled_from(primitives()))
        inputs = {}
        for arg in primitive.tensor_args:
            if arg == "values":
                inputs[arg] = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
            elif draw(st.integers(0, 3)):
                inputs[arg] = draw(st.sampled_from(names))
        params = {arg: draw(hostile_values) for arg in primitive.param_args if draw(st.booleans())}
        nodes.append(
            {"id": f"n{i}", "op": f"mil.{primitive.name}", "inputs": inputs, "params": params}
        )
        names.append(f"n{i}")
    small = st.lists(st.integers(1, 8), min_size=1, max_size=5)
    inputs = {
        n: {
            "shape": draw(st.one_of(small, small, shapes)),
            "dtype": draw(st.sampled_from(["fp16", "fp32", "int32"])),
        }
        for n in ("a", "b")
    }
    used = {
        r for n in nodes for v in n["inputs"].values() for r in (v if isinstance(v, list) else [v])
    }
    outputs = {f"out_{n['id']}": n["id"] for n in nodes if n["id"] not in used}
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs}


def _build(body: dict) -> None:
    try:
        graph = GraphParams.model_validate(body)
    except (ValidationError, RequestError):
        return
    try:
        build = build_graph(graph)
    except RequestError as exc:
        assert exc.field and exc.field.startswith(("nodes[", "inputs.", "outputs.", "target"))
        return
    to_json({"outputs": [list(v.tensor.shape) for v in build.program.main.outputs]})


@pytest.mark.slow
@settings(max_examples=400, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_graphs_build_or_are_refused_naming_a_node(body):
    _build(body)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(random_graphs(), st.sampled_from(["mlpackage", "mil"]))
def test_random_graphs_against_the_live_server(server, body, fmt):
    # mlpackage (the default) too: its model description holds fewer dtypes than mil's program
    answer = server.client.post("/v1/graphs", json={**body, "format": fmt})
    assert answer.status_code < 500, answer.text
    assert answer.status_code in (200, 413, 422), answer.text


def _ints(value) -> bool:
    if isinstance(value, list):
        return all(_ints(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


@pytest.mark.slow
@settings(max_examples=500, deadline=2000)
@given(hostile_values, st.sampled_from([None, DType.INT32, DType.INT8, DType.UINT8, DType.FP16]))
def test_literals_are_stored_exactly_or_refused(value, dtype):
    """A literal becomes a const holding exactly its integers, or is refused: never wrapped."""
    try:
        var = Builder().const("c", value, dtype)
    except MILBuildError:
        return
    stored = var.op.value.stored()
    if _ints(value) and (dtype is None or dtype.is_int) and value != []:
        assert np.asarray(stored).tolist() == value
