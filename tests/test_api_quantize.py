"""Quantized kernels and graph nodes over HTTP against a live server: the `quantize` option on a
kernel request and on graph nodes, the quantization error in verification.json, the per-format
preflight warnings in X-ANE-Preflight, max_quantization_error refusing a request, jobs giving the
same bytes, and bad configs answered 422 naming the field while the server keeps serving."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from http_support import assert_problem, job_artifact, kernel_json

from app.api.openapi import KERNEL_EXAMPLES

CONV = {"in_channels": 64, "out_channels": 32, "spatial": 4}
RNG = np.random.default_rng(11)
WEIGHT = (RNG.standard_normal((32, 64)) * 0.1).astype(np.float32)
PALETTE4 = {"mode": "palettize", "nbits": 4}


def conv(**extra) -> dict:
    return {**CONV, "weights": {"weight": WEIGHT.tolist()}, **extra}


def report(content: bytes) -> dict:
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        return json.loads(zf.read("verification.json"))


def test_a_quantized_kernel_reports_both_errors_and_the_format_warnings(client):
    answer = client.post("/v1/kernels/conv", json=conv(quantize=PALETTE4, verify=True))
    assert answer.status_code == 200, answer.text
    weight = kernel_json(answer.content)["weights"]["weight"]
    assert weight["quantized"]["mode"] == "palettize" and weight["quantized"]["nbits"] == 4
    assert weight["quantized"]["ops"] == ["constexpr_lut_to_dense"]
    checked = report(answer.content)
    assert checked["passed"] and checked["outputs"]["y"]["passed"]
    assert 0 < checked["quantization"]["max_rel_error"] < 0.5
    # ironmill reports 4-bit palettes rejected on the direct path of some chips: a warning
    assert "quant.reported-failing" in answer.headers["X-ANE-Preflight"]
    findings = kernel_json(answer.content)["preflight"]
    assert any(f["rule"] == "quant.reported-failing" and f["node"] == "weight" for f in findings)

    plain = client.post("/v1/kernels/conv", json=conv(verify=True))
    assert plain.status_code == 200 and plain.content != answer.content
    assert "quantization" not in report(plain.content)


def test_the_error_limit_refuses_the_request_and_nothing_is_cached(client):
    strict = conv(quantize={"mode": "palettize", "nbits": 1}, max_quantization_error=1e-3)
    refused = client.post("/v1/kernels/conv", json=strict)
    body = assert_problem(refused, 422, "max_quantization_error")
    assert body["title"] == "Quantization error too large"
    assert body["quantization"]["max_rel_error"] > 1e-3
    again = client.post("/v1/kernels/conv", json=strict)
    assert_problem(again, 422, "max_quantization_error")  # built again, not a cached answer

    loose = client.post("/v1/kernels/conv", json={**strict, "max_quantization_error": 5.0})
    assert loose.status_code == 200, loose.text
    assert report(loose.content)["quantization"]["limit"] == 5.0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (conv(quantize={"mode": "palettize", "nbits": 5}), "quantize.nbits"),
        (
            conv(
                quantize={
                    "mode": "palettize",
                    "nbits": 4,
                    "granularity": "per_grouped_channel",
                    "group_size": 5,
                }
            ),
            "quantize.group_size",
        ),
        (
            conv(quantize={"mode": "linear", "granularity": "per_block", "block_size": 24}),
            "quantize.block_size",
        ),
        (conv(quantize={"mode": "prune", "target_sparsity": 0}), "quantize.target_sparsity"),
        (conv(quantize={"mode": "linear", "dtype": "int4"}, target="ios17"), "quantize.dtype"),
        (conv(quantize={"mode": "linear", "bits": 8}), "quantize.bits"),
        (conv(quantize="int8"), "quantize"),
        (conv(max_quantization_error=0.1), "max_quantization_error"),
        (conv(quantize=PALETTE4, max_quantization_error=-1), "max_quantization_error"),
        ({"op": "rmsnorm", "channels": 64, "spatial": 4, "quantize": PALETTE4}, "quantize"),
    ],
)
def test_bad_quantize_options_are_422_naming_the_field(client, body, field):
    op = body.get("op", "conv")
    assert_problem(client.post(f"/v1/kernels/{op}", json=body), 422, field)
    assert client.get("/healthz").status_code == 200


def _ffn(quantize: dict | None, primitive_quantize: bool = False) -> dict:
    d, h, s = 16, 32, 4
    nodes = [
        {
            "id": "up",
            "op": "conv",
            "params": {"out_channels": h},
            "inputs": {"x": "x"},
            "quantize": quantize,
        },
        {"id": "act", "op": "silu", "inputs": {"x": "up"}},
        {"id": "down", "op": "conv", "params": {"out_channels": d}, "inputs": {"x": "act"}},
    ]
    if primitive_quantize:
        nodes[1]["quantize"] = quantize
    return {
        "inputs": {"x": {"shape": [1, d, 1, s]}},
        "nodes": nodes,
        "outputs": {"y": "down"},
        "verify": True,
        "name": "qffn",
    }


def test_graph_nodes_are_quantized_one_by_one(client, server):
    config = {"mode": "linear", "dtype": "int8"}
    weights = {
        "up.weight": (RNG.standard_normal((32, 16)) * 0.2).astype(np.float32),
        "down.weight": (RNG.standard_normal((16, 32)) * 0.2).astype(np.float32),
    }
    body = _ffn(config)
    for key, array in weights.items():
        node, _, w = key.partition(".")
        next(n for n in body["nodes"] if n["id"] == node)["weights"] = {w: array.tolist()}
    answer = client.post("/v1/graphs", json=body)
    assert answer.status_code == 200, answer.text
    described = kernel_json(answer.content)["weights"]
    assert described["up.weight"]["quantized"]["dtype"] == "int8"
    assert "quantized" not in described["down.weight"]
    checked = report(answer.content)
    assert checked["passed"], checked
    assert list(checked["quantization"]["weights"]) == ["up.weight"]

    assert job_artifact(client, body)[1] == answer.content

    bad = client.post("/v1/graphs", json=_ffn({"mode": "palettize", "nbits": 7}))
    assert_problem(bad, 422, "nodes[0].quantize.nbits")
    primitive = client.post("/v1/graphs", json=_ffn(config, primitive_quantize=True))
    assert_problem(primitive, 422, "nodes[1].quantize")
    top = client.post("/v1/graphs", json={**_ffn(None), "max_quantization_error": 0.1})
    assert_problem(top, 422, "max_quantization_error")


def test_a_quantized_kernel_as_a_job_gives_the_same_bytes(client):
    body = conv(op="conv", quantize={"mode": "prune", "target_sparsity": 0.5}, name="pruned")
    sync = client.post("/v1/kernels/conv", json=body)
    assert sync.status_code == 200, sync.text
    job, content = job_artifact(client, body)
    assert job["request"]["quantize"]["target_sparsity"] == 0.5
    assert content == sync.content


def test_the_docs_quantized_example_runs_as_it_is(client):
    example = KERNEL_EXAMPLES["conv_palettized"]["value"]
    answer = client.post("/v1/kernels", json=example)
    assert answer.status_code == 200, answer.text
    checked = report(answer.content)
    assert checked["passed"] and checked["quantization"]["limit"] == 0.5
