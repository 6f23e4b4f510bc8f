"""The per-build estimate: work read off the built IR, priced per program and device, kept out of
the artifact; on HTTP (X-ANE-Estimate, GET /v1/estimate) and the command line."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from app import artifacts
from app.artifacts import Limits
from app.catalog_build import build_kernel
from app.devices import get_chip
from app.estimates import (
    DEFAULT_DEVICES,
    ProgramWork,
    build_works,
    devices_or_error,
    estimate_works,
    header_value,
    works_from_json,
)
from app.request import KernelRequest
from tests.http_support import assert_problem, npy_bytes

CONV = {"in_channels": 256, "out_channels": 128, "spatial": 64}
LUT4 = {"mode": "palettize", "nbits": 4}


def _prepared(op="conv", params=CONV, quantize=None, fmt="mil", limits=Limits(), **kw):
    request = KernelRequest.create(op, params, {}, format=fmt, quantize=quantize, **kw)
    return artifacts.prepare(request, limits, random_seed=0)


def test_a_convs_work_is_read_off_its_program():
    (work,), kind = build_works(_prepared().build)
    assert kind == "program"
    assert work.flops == 2 * 128 * 256 * 64  # 2 * out * C_in (1x1 kernel)
    assert 128 * 256 * 2 <= work.weight_bytes < 128 * 256 * 2 + 1024  # the weight (+ a bias)
    assert work.activation_bytes == (256 + 128) * 64 * 2 and work.largest_axis == 256
    assert work.compression is None and work.dense_weight_bytes == work.weight_bytes


def test_palettized_weights_stream_compressed_only_where_the_chip_streams_them():
    (work,), kind = build_works(_prepared(quantize=LUT4).build)
    assert work.compression == "palettize" and work.weight_bytes < work.dense_weight_bytes / 3
    priced = estimate_works([work], kind, devices_or_error(["m1", "m5"]))["devices"]
    assert all(d["programs"][0]["weight_bytes_streamed"] == work.weight_bytes for d in priced)
    (int8,), _ = build_works(_prepared(quantize={"mode": "linear", "dtype": "int8"}).build)
    m1, m2 = estimate_works([int8], kind, devices_or_error(["m1", "m2"]))["devices"]
    assert m1["programs"][0]["weight_bytes_streamed"] == int8.dense_weight_bytes  # M1: no int8
    assert m2["programs"][0]["weight_bytes_streamed"] == int8.weight_bytes


def test_a_chain_pays_one_dispatch_per_program():
    params = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_layers": 4,
        "seq_len": 16,
        "split": True,
    }
    whole = _prepared("decoder_stack", {**params, "split": False})
    chained = _prepared("decoder_stack", params, limits=Limits(max_program_weight_bytes=80_000))
    assert chained.chain is not None and len(chained.chain.parts) >= 2
    one, kind_one = build_works(whole.build)
    parts, kind = build_works(chained.build, chained.chain)
    assert (kind_one, kind) == ("program", "chain") and len(parts) == len(chained.chain.parts)
    assert sum(w.flops for w in parts) == pytest.approx(one[0].flops, rel=0.02)
    chip = get_chip("a18-pro")
    a, b = (estimate_works(w, k, [chip])["devices"][0] for w, k in ((one, kind_one), (parts, kind)))
    assert b["dispatches"] == len(parts) and a["dispatches"] == 1
    assert b["latency_ms"] == pytest.approx(sum(p["latency_ms"] for p in b["programs"]), abs=1e-3)
    floor_ms = chip.floor_us.value / 1000
    assert b["latency_ms"] > a["latency_ms"] + (len(parts) - 1) * floor_ms * 0.9


def test_a_package_of_functions_is_priced_one_function_at_a_time():
    base = {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "seq_len": 8,
    }
    functions = {"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 16}}
    weights = build_kernel("decoder_layer", base, random_seed=0).weights
    request = KernelRequest.create(
        "decoder_layer", base, weights, format="mil", functions=functions
    )
    works, kind = build_works(artifacts.prepare(request).build)
    assert kind == "functions" and [w.name.split(".")[-1] for w in works] == ["prefill", "decode"]
    assert works[0].flops > works[1].flops  # 8 positions against 1
    device = estimate_works(works, kind, [get_chip("m4")])["devices"][0]
    assert "latency_ms" not in device and len(device["programs"]) == 2


def test_a_program_over_a_chips_axis_does_not_fit_there():
    # the catalog keeps its own axes within 16,384; a graph's or a chain's may be wider
    works, kind = [ProgramWork("wide", 10**6, 4096, 4096, 4096, largest_axis=20_000)], "program"
    a15, a16 = estimate_works(works, kind, devices_or_error(["a15", "a16"]))["devices"]
    assert not a15["fits"] and "16,384" in a15["programs"][0]["why"] and a16["fits"]
    assert "!" in header_value(works, kind).split("; ")[0]  # m1: 16,384 too


def test_the_estimate_stays_out_of_the_artifact():
    prepared = _prepared()
    once, again = artifacts.zip_bytes(prepared), artifacts.zip_bytes(_prepared())
    assert once == again
    with zipfile.ZipFile(io.BytesIO(once)) as zf:
        text = b"".join(zf.read(n) for n in zf.namelist() if n.endswith(".json"))
    assert b"flops" not in text and b"latency" not in text
    assert works_from_json(prepared.work) is not None


def test_kernel_answers_carry_an_estimate_and_get_estimate_prices_the_artifact(client):
    w = (np.eye(64) * 0.5).astype(np.float16)
    digest = client.post("/v1/blobs", files={"file": ("w.npy", npy_bytes(w))}).json()["digest"]
    body = {"in_channels": 64, "out_channels": 64, "spatial": 32, "weights": {"weight": digest}}
    first = client.post("/v1/kernels/conv", json=body)
    assert first.status_code == 200, first.text
    header = first.headers["x-ane-estimate"]
    assert [part.split("=")[0] for part in header.split("; ")] == list(DEFAULT_DEVICES)
    assert client.post("/v1/kernels/conv", json=body).headers["x-ane-estimate"] == header
    chosen = client.post("/v1/kernels/conv", params={"device": ["m4", "a15"]}, json=body)
    assert [p.split("=")[0] for p in chosen.headers["x-ane-estimate"].split("; ")] == ["m4", "a15"]
    assert_problem(
        client.post("/v1/kernels/conv", params={"device": "m9"}, json=body), 422, "device"
    )
    etag = first.headers["etag"]
    answer = client.get("/v1/estimate", params={"artifact": etag, "device": ["m4", "a15"]})
    assert answer.status_code == 200, answer.text
    m4, a15 = answer.json()["devices"]
    assert m4["device"] == "m4" and a15["device"] == "a15"
    assert m4["programs"][0]["flops"] == 2 * 64 * 64 * 32
    low, high = m4["latency_ms_range"]
    assert low < m4["latency_ms"] < high and f"m4={m4['latency_ms']:g}ms" in header
    assert_problem(
        client.get("/v1/estimate", params={"artifact": etag, "device": "m9"}), 422, "device"
    )
    assert_problem(
        client.get("/v1/estimate", params={"artifact": "sha256:" + "0" * 64}), 404, "artifact"
    )


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["mil", "mlpackage"])
def test_estimate_on_the_command_line(tmp_path, fmt):
    out = tmp_path / "c.zip"
    compiled = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "compile",
            "conv",
            "--params",
            json.dumps(CONV),
            "--random-weights",
            "1",
            "--format",
            fmt,
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, compiled.stderr
    assert "estimate: m1=" in compiled.stdout  # the build summary
    run = [sys.executable, "-m", "app.cli", "estimate", str(out)]
    answer = json.loads(
        subprocess.run([*run, "--device", "m4", "--json"], capture_output=True, text=True).stdout
    )
    (m4,) = answer["devices"]
    expected = estimate_works(*build_works(_prepared(fmt=fmt).build), [get_chip("m4")])
    assert m4["programs"][0]["flops"] == expected["devices"][0]["programs"][0]["flops"]
    assert m4["latency_ms"] == expected["devices"][0]["latency_ms"]
    bad = subprocess.run([*run, "--device", "m9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "a19-pro" in bad.stderr
