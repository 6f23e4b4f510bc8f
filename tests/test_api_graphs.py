"""POST /v1/graphs against a live server: the docs' SwiGLU example as it is, weights inline, by
digest and as multipart parts, cache and single-flight as for kernels, graphs as jobs, the
primitives listed by /v1/ops, and bad graphs answered 4xx naming the node path."""

import copy
import io
import json
import zipfile

import numpy as np
from http_support import (
    assert_problem,
    job_artifact,
    job_ended,
    kernel_json,
    npy_bytes,
    zip_names,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.openapi import SWIGLU_FFN
from app.graphs.examples import swiglu_ffn
from app.graphs.primitives import primitives
from app.reference.validation import validate

D, H, S = 8, 16, 4
RNG = np.random.default_rng(3)
W = {
    "gate": (RNG.standard_normal((H, D)) * 0.3).astype(np.float32),
    "up": (RNG.standard_normal((H, D)) * 0.3).astype(np.float32),
    "down": (RNG.standard_normal((D, H)) * 0.3).astype(np.float32),
}


def ffn(weights: dict | None = None, **extra) -> dict:
    return {"name": "ffn", **swiglu_ffn(D, H, S, weights), **extra}


def inline() -> dict[str, list]:
    return {k: v.tolist() for k, v in W.items()}


def test_the_docs_swiglu_example_runs_as_it_is(client):
    answer = client.post("/v1/graphs", json=SWIGLU_FFN)
    assert answer.status_code == 200, answer.text
    with zipfile.ZipFile(io.BytesIO(answer.content)) as zf:
        report = json.loads(zf.read("verification.json"))
        assert zf.read("model.mil").count(b'[name = string("gate")]') == 1
    assert report["passed"], report["outputs"]


def test_a_graph_is_cached_and_single_flight_like_a_kernel(client):
    body = ffn(inline(), bypass_cache=False, target="ios17")
    first = client.post("/v1/graphs", json=body)
    assert first.status_code == 200, first.text
    again = client.post("/v1/graphs", json=body)
    assert first.headers["x-cache"] == "miss" and again.headers["x-cache"] == "hit"
    assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
    assert first.headers["content-disposition"] == 'attachment; filename="ffn.mlpackage.zip"'
    described = kernel_json(first.content)
    assert described["op"] == "graph" and set(described["weights"]) == {
        "gate.weight",
        "up.weight",
        "down.weight",
    }
    assert "ffn.mlpackage/Data/com.apple.CoreML/model.mlmodel" in zip_names(first.content)


def test_weights_by_digest_and_as_parts_give_the_same_bytes(client):
    by_value = client.post("/v1/graphs", json=ffn(inline(), format="mil"))
    digests = {
        name: client.post("/v1/blobs", files={"file": ("w.npy", npy_bytes(w))}).json()["digest"]
        for name, w in W.items()
    }
    by_digest = client.post("/v1/graphs", json=ffn(digests, format="mil"))
    parts = {f"{name}.weight": (f"{name}.npy", npy_bytes(w)) for name, w in W.items()}
    spec = json.dumps(ffn(format="mil"))
    as_parts = client.post("/v1/graphs", files={"spec": (None, spec), **parts})
    for answer in (by_value, by_digest, as_parts):
        assert answer.status_code == 200, answer.text
    assert by_value.content == by_digest.content == as_parts.content


def test_a_graph_as_a_job_gives_the_same_bytes(client):
    body = ffn(inline(), format="mil", name="ffn_job")
    sync = client.post("/v1/graphs", json=body)
    job, content = job_artifact(client, body)
    assert job["request"]["op"] == "graph" and job["request"]["kind"] == "graph"
    assert content == sync.content


def test_a_graph_mixed_with_a_kernels_options_is_refused_naming_the_option(client):
    """A body with nodes is a graph: a catalog op's options on it are named, on each edge."""
    quantize = {"mode": "palettize", "nbits": 4}
    functions = {"prefill": {}}
    for path in ("/v1/graphs", "/v1/jobs"):
        for option, value in (("quantize", quantize), ("functions", functions)):
            answer = client.post(path, json=ffn(inline(), **{option: value}))
            assert_problem(answer, 422, option)


def test_the_primitives_are_listed_with_their_arguments(client):
    ops = client.get("/v1/ops", params={"kind": "primitive"}).json()
    assert {o["name"].removeprefix("mil.") for o in ops} == {p.name for p in primitives()}
    split = next(o for o in ops if o["name"] == "split")
    assert (
        split["arguments"]["x"]["in"] == "inputs" and split["arguments"]["axis"]["in"] == "params"
    )
    concat = next(o for o in ops if o["name"] == "concat")
    assert concat["arguments"]["values"]["list"] is True
    assert {o["name"] for o in ops} >= {"mil.conv", "mil.matmul", "silu", "rsqrt"}
    every = client.get("/v1/ops", params={"kind": "all"}).json()
    assert [o["kind"] for o in every].count("op") == len(client.get("/v1/ops").json())


def _with(body: dict, index: int, **changes) -> dict:
    body = copy.deepcopy(body)
    body["nodes"][index].update(changes)
    return body


def test_bad_graphs_are_4xx_naming_the_node_and_the_server_keeps_serving(client):
    good = ffn(inline())
    cases = [
        (_with(good, 0, inputs={"x": "down"}), "nodes[0].inputs"),
        (_with(good, 3, inputs={"x": "act", "y": "nope"}), "nodes[3].inputs.y"),
        (_with(good, 1, id="gate"), "nodes[1].id"),
        ({**good, "outputs": {"y": "h"}}, "nodes[4]"),
        (_with(good, 2, op="mil.swish"), "nodes[2].op"),
        (_with(good, 1, weights={}), "nodes[1].weights.weight"),
        (_with(good, 1, weights={"weight": [[1.0, 2.0]]}), "nodes[1].weights.weight"),
        (
            _with(good, 1, params={"out_channels": 4}, weights={"weight": W["up"][:4].tolist()}),
            "nodes[3]",
        ),
        (_with(good, 2, weights={"x": [1.0]}), "nodes[2].weights.x"),
    ]
    for body, field in cases:
        assert_problem(client.post("/v1/graphs", json=body), 422, field)
    parts = {"nope.weight": ("w.npy", npy_bytes(W["up"]))}
    spec = json.dumps(ffn(inline()))
    assert_problem(
        client.post("/v1/graphs", files={"spec": (None, spec), **parts}), 422, "nope.weight"
    )
    assert client.post("/v1/graphs", json=good).status_code == 200


def test_more_nodes_than_the_limit_is_refused(client):
    chain = [
        {"id": f"n{i}", "op": "relu", "inputs": {"x": f"n{i - 1}" if i else "x"}}
        for i in range(1001)
    ]
    body = {"inputs": {"x": {"shape": [1, 4]}}, "nodes": chain, "outputs": {"y": "n1000"}}
    problem = assert_problem(client.post("/v1/graphs", json=body), 422, "nodes")
    assert problem["limit"] == 1000


UNARY = ["relu", "sigmoid", "silu", "tanh", "exp", "abs", "square", "gelu"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


@st.composite
def random_dags(draw):
    """Random DAGs of primitives over two inputs; some shapes mismatch, some refer badly."""
    shapes = [(1, 8, 1, 4), (1, 8, 1, 1), (1, 4, 1, 4)]
    nodes, names = [], ["a", "b"]
    for i in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            op = draw(st.sampled_from(UNARY))
            node = {"id": f"n{i}", "op": op, "inputs": {"x": draw(st.sampled_from(names))}}
        else:
            op = draw(st.sampled_from(BINARY))
            x, y = draw(st.sampled_from(names)), draw(st.sampled_from([*names, "nope"]))
            node = {"id": f"n{i}", "op": op, "inputs": {"x": x, "y": y}}
        nodes.append(node)
        names.append(node["id"])
    used = {r for n in nodes for r in n["inputs"].values()}
    outputs = {f"out_{n['id']}": n["id"] for n in nodes if n["id"] not in used}
    inputs = {
        "a": {"shape": list(draw(st.sampled_from(shapes)))},
        "b": {"shape": list(draw(st.sampled_from(shapes)))},
    }
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs, "verify": True, "format": "mil"}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(random_dags())
def test_random_dags_build_and_verify_or_fail_naming_a_node(client, graph):
    answer = client.post("/v1/graphs", json=graph)
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        field = answer.json()["field"]
        assert field.startswith(("nodes[", "outputs", "inputs")), answer.json()
        return
    with zipfile.ZipFile(io.BytesIO(answer.content)) as zf:
        report = json.loads(zf.read("verification.json"))
    assert set(report["outputs"]) == set(graph["outputs"])


def test_preflight_findings_reach_kernel_json_and_the_header(client):
    answer = client.post("/v1/graphs", json=ffn(inline(), name="ffn_pf"))
    assert answer.status_code == 200, answer.text
    header = answer.headers["x-ane-preflight"]
    findings = kernel_json(answer.content)["preflight"]
    assert header.startswith(f"error=0 warning={sum(f['severity'] == 'warning' for f in findings)}")
    assert {f["rule"] for f in findings} <= set(header.split("rules=")[1].split(","))
    assert all(f["source"] and f["node"] for f in findings)
    again = client.post("/v1/graphs", json=ffn(inline(), name="ffn_pf"))
    assert again.headers["x-cache"] == "hit" and again.headers["x-ane-preflight"] == header


def test_strict_preflight_refuses_an_error_naming_the_node(client):
    masked = {
        "inputs": {"q": {"shape": [1, 2, 4, 8]}, "mask": {"shape": [1, 1, 4, 4]}},
        "nodes": [
            {
                "id": "att",
                "op": "mil.scaled_dot_product_attention",
                "inputs": {"query": "q", "key": "q", "value": "q", "attn_mask": "mask"},
            },
        ],
        "outputs": {"y": "att"},
    }
    lenient = client.post("/v1/graphs", json=masked)
    assert lenient.status_code == 200 and "sdpa.attn-mask" in lenient.headers["x-ane-preflight"]
    problem = assert_problem(
        client.post("/v1/graphs", json={**masked, "preflight": "strict"}), 422, "nodes[0]"
    )
    assert problem["preflight"]["rule"] == "sdpa.attn-mask" and "mask" in problem["detail"]


def _chain_of_convs(digests: list[str], count: int) -> dict:
    """x -> conv -> conv -> ..., 1024×1024 convs with the uploaded weights in turn (distinct
    ones: the default passes keep one const of a weight used twice, which then counts once)."""
    nodes = [
        {
            "id": f"c{i}",
            "op": "conv",
            "params": {"out_channels": 1024},
            "inputs": {"x": f"c{i - 1}" if i else "x"},
            "weights": {"weight": digests[i % len(digests)]},
        }
        for i in range(count)
    ]
    return {
        "inputs": {"x": {"shape": [1, 1024, 1, 16]}},
        "nodes": nodes,
        "outputs": {"y": f"c{count - 1}"},
    }


def _eye_weights(client, count: int) -> list[str]:
    """`count` distinct 1024×1024 fp16 weights (2 MiB each), uploaded: their digests."""
    return [
        client.post(
            "/v1/blobs",
            files={"file": ("w.npy", npy_bytes((np.eye(1024) * (0.5 + i / 8)).astype(np.float16)))},
        ).json()["digest"]
        for i in range(count)
    ]


def test_a_graph_over_the_program_budget_names_the_limit(client):
    digests = _eye_weights(client, 5)  # 2 MiB each; five are over 8 MiB
    assert client.post("/v1/graphs", json=_chain_of_convs(digests, 4)).status_code == 200
    problem = assert_problem(
        client.post("/v1/graphs", json=_chain_of_convs(digests, 5)), 422, "split"
    )
    assert problem["limit"] == 8 << 20 and "split: true" in problem["detail"]


def test_split_true_gives_a_chain_of_programs_within_the_budget(client, tmp_path):
    body = {**_chain_of_convs(_eye_weights(client, 5), 5), "split": True, "verify": True}
    body["name"] = "deep"
    answer = client.post("/v1/graphs", json=body)
    assert answer.status_code == 200, answer.text
    with zipfile.ZipFile(io.BytesIO(answer.content)) as zf:
        chain = json.loads(zf.read("chain.json"))
        kernel = json.loads(zf.read("kernel.json"))
        report = json.loads(zf.read("verification.json"))
        names = zf.namelist()
    assert [p["name"] for p in chain["programs"]] == ["deep_0", "deep_1"] == kernel["chain"]
    assert chain["programs"][1]["inputs"] == {"c3": {"from": "program", "program": 0, "name": "c3"}}
    assert chain["outputs"] == {"y": {"from": "program", "program": 1, "name": "y"}}
    sizes = [
        zipfile.ZipFile(io.BytesIO(answer.content))
        .getinfo(f"deep_{i}.mlpackage/Data/com.apple.CoreML/weights/weight.bin")
        .file_size
        for i in range(2)
    ]
    assert all(size <= (8 << 20) + 4096 for size in sizes)  # each within the budget (+ headers)
    assert report["passed"], report["outputs"]
    assert "deep_1.mlpackage/Data/com.apple.CoreML/model.mlmodel" in names
    for i in range(2):  # each program loads under coremltools' loader
        path = tmp_path / f"deep_{i}.zip"
        with zipfile.ZipFile(io.BytesIO(answer.content)) as zf, zipfile.ZipFile(path, "w") as out:
            for item in zf.namelist():
                if item.startswith(f"deep_{i}.mlpackage/"):
                    out.writestr(item, zf.read(item))
        assert validate(path).ops > 0


def test_a_bool_output_is_refused_for_core_ml_formats_naming_it_and_kept_for_the_others(client):
    """A comparison's bool output has no Core ML feature type: the Core ML formats refuse it
    naming the output (synchronously a 422; a job fails with the same field), before anything is
    written; the raw bundle takes it."""
    body = {
        "inputs": {"x": {"shape": [1, 4]}},
        "nodes": [{"id": "g", "op": "greater", "inputs": {"x": "x", "y": "x"}}],
        "outputs": {"mask": "g"},
    }
    for fmt in ("mlpackage", "mlmodelc"):
        problem = assert_problem(
            client.post("/v1/graphs", json={**body, "format": fmt}), 422, "outputs.mask"
        )
        assert "bool cannot be a Core ML model's output" in problem["detail"]
        job = job_ended(client, {**body, "format": fmt})
        assert job["state"] == "failed", job
        assert job["error"]["field"] == "outputs.mask" and job["error"]["kind"] == "spec", job
    assert client.post("/v1/graphs", json={**body, "format": "mil"}).status_code == 200
