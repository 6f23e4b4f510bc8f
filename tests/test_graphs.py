"""Graphs built into ONE program: a SwiGLU FFN and a mixed graph through coremltools' loader and
the model.mil parser, verified against the float64 composition of their nodes; the program's ops
named after the node ids; and every structural fault named by its path."""

import io
import json
import zipfile

import numpy as np
import pytest

from app import artifacts
from app.errors import RequestError
from app.graphs.build import build_graph
from app.graphs.examples import swiglu_ffn
from app.graphs.spec import GraphParams
from app.mil import parse_text
from app.reference.load import open_artifact
from app.reference.validation import validate
from app.request import KernelRequest

D, H, S = 16, 24, 8
RNG = np.random.default_rng(0)
FFN = swiglu_ffn(D, H, S)
FFN_WEIGHTS = {
    "gate.weight": (RNG.standard_normal((H, D)) * D**-0.5).astype(np.float32),
    "up.weight": (RNG.standard_normal((H, D)) * D**-0.5).astype(np.float32),
    "down.weight": (RNG.standard_normal((D, H)) * H**-0.5).astype(np.float32),
}
# A catalog op (rmsnorm) and primitives, with two outputs: one a split's second half.
MIXED = {
    "inputs": {"x": {"shape": [1, D, 1, S]}, "r": {"shape": [1, D, 1, S]}},
    "nodes": [
        {"id": "norm", "op": "rmsnorm", "params": {"eps": 1e-6}, "inputs": {"x": "x"}},
        {"id": "res", "op": "add", "inputs": {"x": "norm", "y": "r"}},
        {
            "id": "halves",
            "op": "split",
            "params": {"axis": 1, "num_splits": 2},
            "inputs": {"x": "res"},
        },
        {"id": "gated", "op": "mul", "inputs": {"x": "halves.0"}},
        {
            "id": "total",
            "op": "reduce_sum",
            "params": {"axes": [1], "keep_dims": True},
            "inputs": {"x": "gated"},
        },
    ],
    "outputs": {"sum": "total", "upper": "halves.1"},
}
MIXED_WEIGHTS = {
    "norm.weight": (1 + 0.1 * RNG.standard_normal(D)).astype(np.float32),
    "gated.y": RNG.standard_normal((1, D // 2, 1, 1)).astype(np.float32),
}


def _bytes(graph, weights, fmt, **kw) -> bytes:
    request = KernelRequest.create(graph=graph, weights=weights, format=fmt, name="g", **kw)
    return artifacts.zip_bytes(artifacts.prepare(request))


def _zip(graph, weights, fmt, **kw) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(_bytes(graph, weights, fmt, **kw)))


@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
@pytest.mark.parametrize(
    ("graph", "weights"), [(FFN, FFN_WEIGHTS), (MIXED, MIXED_WEIGHTS)], ids=["ffn", "mixed"]
)
def test_a_graph_loads_parses_back_and_verifies(tmp_path, graph, weights, fmt):
    path = tmp_path / f"g.{fmt}.zip"
    path.write_bytes(_bytes(graph, weights, fmt, verify=True))
    zf = zipfile.ZipFile(path)
    report = validate(path)  # coremltools' loader (mlpackage) or our parser (mil)
    assert report.ops > len(graph["nodes"])
    verification = json.loads(zf.read("verification.json"))
    assert verification["passed"], verification["outputs"]
    assert set(verification["outputs"]) == set(graph["outputs"])
    program = open_artifact(path).program
    assert [v.name for v in program.main.outputs] == list(graph["outputs"])
    kernel = json.loads(zf.read("kernel.json"))
    assert kernel["op"] == "graph" and set(kernel["weights"]) == set(weights)


def test_the_program_is_one_function_with_the_nodes_ops_in_order_named_after_them():
    build = build_graph(GraphParams.model_validate(FFN), FFN_WEIGHTS)
    assert list(build.program.functions) == ["main"]
    named = [op.name for op in build.program.main.operations if op.type != "const"]
    assert named == ["gate", "up", "act", "h", "down"]
    assert build.program.main.outputs[0].name == "y"  # the graph's output name
    mixed = build_graph(GraphParams.model_validate(MIXED), MIXED_WEIGHTS)
    ops = [op for op in mixed.program.main.operations if op.type != "const"]
    norm = [op.name for op in ops if op.name.startswith("norm")]
    assert norm[-1] == "norm" and all(n.startswith("norm_") for n in norm[:-1])
    (split,) = [op for op in ops if op.type == "split"]
    assert [v.name for v in split.outputs] == ["halves_0", "upper"]


def test_nodes_listed_out_of_order_are_built_after_what_they_read():
    shuffled = {**FFN, "nodes": [FFN["nodes"][i] for i in (4, 3, 2, 0, 1)]}
    build = build_graph(GraphParams.model_validate(shuffled), FFN_WEIGHTS)
    named = [op.name for op in build.program.main.operations if op.type != "const"]
    # every node after what it reads; among the ready ones, the one listed first
    assert named == ["gate", "act", "up", "h", "down"]


@pytest.mark.parametrize("passes", ["none", "default"])
def test_identical_weights_are_stored_once(passes):
    """As built, two consts share one blob; the default passes (const_deduplication) keep one
    const, which both convs read."""
    same = dict(FFN_WEIGHTS, **{"up.weight": FFN_WEIGHTS["gate.weight"]})
    zf = _zip(FFN, same, "mil", passes=passes)
    weight_bin = zf.read("weights/weight.bin")
    blob_count = int.from_bytes(weight_bin[4:8], "little")
    assert blob_count == 2
    text = zf.read("model.mil").decode()
    parsed = parse_text(text, weight_bin)
    if passes == "none":
        assert parsed.offsets["gate_weight"] == parsed.offsets["up_weight"]
    else:
        assert "up_weight" not in parsed.offsets and text.count("gate_weight") == 3


def _node(graph, index, **changes):
    nodes = [dict(n) for n in graph["nodes"]]
    nodes[index] = {**nodes[index], **changes}
    return {**graph, "nodes": nodes}


BAD = [
    (
        "cycle",
        _node(FFN, 0, inputs={"x": "down"}),
        "nodes[0].inputs",
        "cycle: gate -> act -> h -> down -> gate",
    ),
    (
        "unknown reference",
        _node(FFN, 3, inputs={"x": "act", "y": "upp"}),
        "nodes[3].inputs.y",
        "neither a graph input",
    ),
    ("duplicate id", _node(FFN, 1, id="gate"), "nodes[1].id", "already the id of nodes[0]"),
    ("dangling", {**FFN, "outputs": {"y": "h"}}, "nodes[4]", "feeds no node and no output"),
    ("unknown op", _node(FFN, 2, op="swish"), "nodes[2].op", "neither a catalog op"),
    ("state op", _node(FFN, 2, op="read_state"), "nodes[2].op", "cannot be a graph node"),
    ("output of nothing", {**FFN, "outputs": {"y": "x"}}, "outputs.y", "not a node id"),
    (
        "pick of one output",
        _node(FFN, 2, inputs={"x": "gate.1"}),
        "nodes[2].inputs.x",
        "has one output",
    ),
]


@pytest.mark.parametrize(
    ("graph", "field", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_structural_faults_name_their_path(graph, field, message):
    with pytest.raises(RequestError) as err:
        build_graph(GraphParams.model_validate(graph), FFN_WEIGHTS)
    assert err.value.field == field and message in err.value.message, err.value


BUILD_FAULTS = [
    (
        "shape mismatch",
        _node(FFN, 1, params={"out_channels": 10}),
        {**FFN_WEIGHTS, "up.weight": np.ones((10, D), np.float32)},
        "nodes[3]",
        "do not broadcast",
    ),
    (
        "params against inputs",
        _node(FFN, 0, params={"out_channels": H, "in_channels": 3}),
        FFN_WEIGHTS,
        "nodes[0].params.in_channels",
        "its inputs fix 16",
    ),
    (
        "missing weight",
        FFN,
        {k: v for k, v in FFN_WEIGHTS.items() if k != "up.weight"},
        "nodes[1].weights.weight",
        "missing weight",
    ),
    (
        "wrong weight shape",
        FFN,
        {**FFN_WEIGHTS, "up.weight": np.ones((3, 3), np.float32)},
        "nodes[1].weights.weight",
        "expected shape",
    ),
    (
        "weight of no node",
        FFN,
        {**FFN_WEIGHTS, "nope.weight": np.ones(3, np.float32)},
        "weights.nope.weight",
        "names no node",
    ),
    (
        "param as input",
        _node(FFN, 2, op="softmax", inputs={"x": "gate", "axis": "x"}),
        FFN_WEIGHTS,
        "nodes[2].inputs.axis",
        "belongs in params",
    ),
    (
        "unknown param",
        _node(FFN, 2, params={"alpha": 1}),
        FFN_WEIGHTS,
        "nodes[2].params.alpha",
        "not an argument of silu",
    ),
    (
        "bad catalog param",
        _node(FFN, 0, params={"out_channels": 0}),
        FFN_WEIGHTS,
        "nodes[0].params.out_channels",
        "greater than or equal to 1",
    ),
]


@pytest.mark.parametrize(
    ("graph", "weights", "field", "message"),
    [b[1:] for b in BUILD_FAULTS],
    ids=[b[0] for b in BUILD_FAULTS],
)
def test_faults_found_while_building_name_the_node(graph, weights, field, message):
    with pytest.raises(RequestError) as err:
        build_graph(GraphParams.model_validate(graph), weights)
    assert err.value.field == field and message in err.value.message, err.value


def test_a_node_the_target_lacks_names_the_target():
    sdpa = {
        "inputs": {"q": {"shape": [1, 2, 4, 8]}},
        "nodes": [{"id": "att", "op": "sdpa", "inputs": {"q": "q", "k": "q", "v": "q"}}],
        "outputs": {"y": "att"},
    }
    assert build_graph(GraphParams.model_validate(sdpa), target="ios18").program
    with pytest.raises(RequestError) as err:
        build_graph(GraphParams.model_validate(sdpa), target="ios17")
    assert err.value.field == "target" and "nodes[0]" in err.value.message


def test_a_split_graph_computes_bit_for_bit_what_the_whole_program_does():
    from app.artifacts import Limits
    from app.reference import Executor
    from app.reference.executor import random_inputs
    from app.reference.verify import run_chain

    graph = {
        "inputs": {"x": {"shape": [1, D, 1, S]}},
        "nodes": [
            {"id": "norm", "op": "rmsnorm", "inputs": {"x": "x"}},
            {
                "id": "halves",
                "op": "split",
                "params": {"axis": 1, "num_splits": 2},
                "inputs": {"x": "norm"},
            },
            {"id": "a", "op": "conv", "params": {"out_channels": 8}, "inputs": {"x": "halves.0"}},
            {"id": "b", "op": "conv", "params": {"out_channels": 8}, "inputs": {"x": "halves.1"}},
            {"id": "total", "op": "add", "inputs": {"x": "a", "y": "b"}},
        ],
        "outputs": {"sum": "total", "upper": "halves.1"},
        "split": True,
    }
    weights = {
        "norm.weight": MIXED_WEIGHTS["norm.weight"],
        "a.weight": (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32),
        "b.weight": (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32),
    }
    request = KernelRequest.create(graph=graph, weights=weights, format="mil", name="m")
    # 32 B of norm weight and 128 B per conv: norm and a fit 170 B, b starts a second program
    prepared = artifacts.prepare(request, Limits(max_program_weight_bytes=170))
    chain = prepared.chain
    assert chain is not None and [p.name for p in chain.parts] == ["m_0", "m_1"]
    # the split's second output is exported as "upper": the second program reads it by that name
    assert set(chain.inputs[1]) == {"a", "upper"}
    whole = prepared.build
    drawn = random_inputs(whole.program.main, 3)
    expected = Executor.from_written_weights(whole.program).run(drawn).outputs
    got = run_chain(chain, drawn).outputs
    assert set(got) == set(expected) == {"sum", "upper"}
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    zf = zipfile.ZipFile(io.BytesIO(artifacts.zip_bytes(prepared)))
    chain_json = json.loads(zf.read("chain.json"))
    for program in chain_json["programs"]:  # every program's text parses back with its weights
        text = zf.read(f"{program['path']}/model.mil").decode()
        blob = f"{program['path']}/weights/weight.bin"
        parse_text(text, zf.read(blob) if blob in zf.namelist() else None)


def test_a_split_graph_with_drawn_weights_holds_the_weights_it_was_built_with():
    """--random-weights with split: each part holds the whole program's drawn weights (it used
    to look for them among the request's, and failed with "missing weight")."""
    from app.artifacts import Limits

    graph = {
        "inputs": {"x": {"shape": [1, 8, 1, 4]}},
        "nodes": [
            {"id": "a", "op": "conv", "params": {"out_channels": 8}, "inputs": {"x": "x"}},
            {"id": "b", "op": "conv", "params": {"out_channels": 8}, "inputs": {"x": "a"}},
        ],
        "outputs": {"y": "b"},
        "split": True,
    }
    request = KernelRequest.create(graph=graph, weights={}, format="mil", name="m")
    prepared = artifacts.prepare(request, Limits(max_program_weight_bytes=130), random_seed=5)
    assert prepared.chain is not None and len(prepared.chain.parts) == 2
    for part in prepared.chain.parts:
        (key,) = part.weights
        np.testing.assert_array_equal(part.weights[key], prepared.build.weights[key])


def test_a_node_heavier_than_the_budget_cannot_be_split():
    from app.artifacts import Limits

    request = KernelRequest.create(graph={**FFN, "split": True}, weights=FFN_WEIGHTS, format="mil")
    with pytest.raises(RequestError) as err:
        artifacts.prepare(request, Limits(max_program_weight_bytes=100))
    assert err.value.field == "nodes[0]" and "alone holds 768 bytes" in err.value.message
