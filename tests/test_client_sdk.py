"""The Python client against a real uvicorn server: byte-identical to local builds, uploads once,
typed errors, retries on 503 with Retry-After."""

import asyncio
import json
import threading

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from http_support import metric, weight_arrays

from app.artifacts import kernel_zip
from app.client import AsyncClient, Client, InvalidRequest, NotFound, Unavailable

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

CONV = {"in_channels": 32, "out_channels": 16, "spatial": 8, "bias": True}


def test_remote_compile_equals_local_compile(server, tmp_path):
    weights = weight_arrays("conv", CONV, seed=11)
    local = kernel_zip("conv", CONV, weights, name="proj")
    with Client(server.url) as c:
        assert c.compile("conv", CONV, weights, name="proj") == local
        saved = c.compile(
            "conv", CONV, weights, name="proj", format="mil", save_to=tmp_path / "p.zip"
        )
    assert saved.read_bytes() == kernel_zip("conv", CONV, weights, name="proj", format="mil")
    config = {"mode": "palettize", "nbits": 6}
    with Client(server.url) as c:
        quantized = c.compile("conv", CONV, weights, name="proj", quantize=config)
        job = c.submit("conv", CONV, weights, name="proj", quantize=config)
        job.wait()
        from_job = job.download(tmp_path / "q.zip").read_bytes()
    assert quantized == from_job == kernel_zip("conv", CONV, weights, name="proj", quantize=config)
    assert quantized != local


def test_async_client_matches(server):
    weights = weight_arrays("rmsnorm", {"channels": 64, "spatial": 4}, seed=2)

    async def go():
        async with AsyncClient(server.url) as c:
            ops = await c.ops()
            data = await c.compile(
                "rmsnorm", {"channels": 64, "spatial": 4}, weights, target="ios17"
            )
            return ops, data

    ops, data = asyncio.run(go())
    assert "rmsnorm" in [o["name"] for o in ops]
    assert data == kernel_zip("rmsnorm", {"channels": 64, "spatial": 4}, weights, target="ios17")


def test_upload_sends_nothing_the_server_has(server, client):
    array = np.random.default_rng(99).standard_normal((64, 64)).astype(np.float32)
    before = metric(client, "ane_http_requests_total", route="/v1/blobs", method="POST")
    with Client(server.url) as c:
        first = c.upload(array)
        second = c.upload(array.copy())
    assert first == second and first.startswith("sha256:")
    assert metric(client, "ane_http_requests_total", route="/v1/blobs", method="POST") == before + 1


def test_errors_are_typed(server):
    with Client(server.url) as c:
        with pytest.raises(InvalidRequest) as bad:
            c.compile("conv", {**CONV, "spatial": 0}, weight_arrays("conv", CONV))
        assert bad.value.status == 422 and bad.value.field and "spatial" in bad.value.field
        with pytest.raises(NotFound) as missing:
            c.compile("nonsense", {})
        assert missing.value.status == 404
        with pytest.raises(Unavailable):  # Core ML's placement report needs a Mac: 503
            Client(server.url, max_retry_wait=0).compile(
                "identity", {"channels": 4, "spatial": 1}, format="mlmodelc", placement=True
            )


def test_retries_503_with_retry_after_until_served(tmp_path):
    # One worker and no backlog: concurrent builds beyond the first are refused with 503 +
    # Retry-After, and every client still ends up with its zip by retrying.
    with uvicorn_server(
        tmp_path / "data", workers="1", max_backlog="0", retry_after_seconds="1"
    ) as url:
        params = {"in_channels": 2048, "out_channels": 2048, "spatial": 8}
        results, errors = {}, []
        together = threading.Barrier(6)

        def fetch(i: int) -> None:
            try:
                weights = weight_arrays("conv", params, seed=i)
                with Client(url, max_retry_wait=120) as c:
                    c.upload(weights["weight"])
                    together.wait()  # every build request arrives at once
                    results[i] = c.compile("conv", params, weights)
            except Exception as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=fetch, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(results) == 6 and len(set(results.values())) == 6
        with httpx.Client(base_url=url) as plain:
            assert (
                metric(plain, "ane_http_requests_total", status="503") >= 1
            )  # retries really happened


def test_cli_compile_with_server_equals_local(server, tmp_path):
    import subprocess
    import sys

    w = weight_arrays("conv", CONV, seed=5)
    np.save(tmp_path / "w.npy", w["weight"])
    np.save(tmp_path / "b.npy", w["bias"])
    common = [
        "compile",
        "conv",
        "--params",
        json.dumps(CONV),
        "--weights",
        f"weight={tmp_path / 'w.npy'}",
        "--weights",
        f"bias={tmp_path / 'b.npy'}",
        "--format",
        "mil",
    ]
    remote = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            *common,
            "--server",
            server.url,
            "-o",
            str(tmp_path / "r.zip"),
        ],
        capture_output=True,
        text=True,
    )
    assert remote.returncode == 0, remote.stderr
    local = subprocess.run(
        [sys.executable, "-m", "app.cli", *common, "-o", str(tmp_path / "l.zip")],
        capture_output=True,
        text=True,
    )
    assert local.returncode == 0, local.stderr
    assert (tmp_path / "r.zip").read_bytes() == (tmp_path / "l.zip").read_bytes()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "compile",
            "conv",
            "--params",
            '{"in_channels": 0}',
            "--server",
            server.url,
            "-o",
            str(tmp_path / "x.zip"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "422" in bad.stderr and not (tmp_path / "x.zip").exists()
    down = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "compile",
            "identity",
            "--params",
            '{"channels": 2, "spatial": 1}',
            "--server",
            "http://127.0.0.1:9",
            "-o",
            str(tmp_path / "y.zip"),
        ],
        capture_output=True,
        text=True,
    )
    assert down.returncode == 4 and "cannot reach" in down.stderr


def test_client_takes_a_checkpoint_like_the_cli(server, tmp_path):
    """`checkpoint_reference` uploads the file(s) once and reads config.json; the build equals
    the local one from the same checkpoint (app.checkpoints.load, what the CLI runs)."""
    from checkpoint_support import LLAMA, write_checkpoint

    from app.checkpoints import load

    path, config, _ = write_checkpoint(tmp_path / "model", LLAMA, dtype="bfloat16", shards=2)
    loaded = load("decoder_layer", path, config, 1, {"seq_len": 4})
    local = kernel_zip("decoder_layer", loaded.params, loaded.weights, format="mil")
    with Client(server.url) as c:
        ref = c.checkpoint_reference(tmp_path / "model", 1)
        assert len(ref["blob"]) == 2 and ref["layer"] == 1 and ref["config"] == LLAMA
        assert c.compile("decoder_layer", {"seq_len": 4}, checkpoint=ref, format="mil") == local
        with pytest.raises(InvalidRequest, match="the model has 3 layers"):
            c.compile(
                "decoder_layer",
                {"seq_len": 4},
                checkpoint=c.checkpoint_reference(path, 5, config=config),
            )


def test_client_passes_functions_and_preflight(server):
    params = {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "seq_len": 4,
    }
    weights = weight_arrays("decoder_layer", params, seed=3)
    functions = {"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 15}}
    local = kernel_zip("decoder_layer", params, weights, functions=functions, target="ios18")
    with Client(server.url) as c:
        assert (
            c.compile("decoder_layer", params, weights, functions=functions, target="ios18")
            == local
        )
        palette = {"mode": "palettize", "nbits": 4}
        strict = c.compile(
            "conv",
            CONV,
            weight_arrays("conv", CONV, seed=1),
            target="ios18",
            quantize=palette,
            preflight="strict",
        )
        assert strict.startswith(b"PK")
        graph = {
            "inputs": {"x": {"shape": [1, 4, 1, 64]}},
            "nodes": [
                {
                    "id": "r",
                    "op": "reshape",
                    "inputs": {"x": "x"},
                    "params": {"shape": [1, 1, 1, 1, 4, 64]},
                },
                {
                    "id": "b",
                    "op": "reshape",
                    "inputs": {"x": "r"},
                    "params": {"shape": [1, 4, 1, 64]},
                },
            ],
            "outputs": {"y": "b"},
            "preflight": "strict",
        }
        # as written: the default passes fold the rank-6 pair away (nothing left to refuse)
        with pytest.raises(InvalidRequest, match="Preflight"):
            c.compile_graph(graph, passes="none")
