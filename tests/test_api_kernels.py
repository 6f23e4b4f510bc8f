"""The kernel endpoints against a live server: every catalog op over JSON and multipart gives a
zip coremltools' loader accepts; weight encodings; blobs; ETag/304; cache; single-flight."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from http_support import (
    assert_problem,
    kernel_json,
    metric,
    npy_bytes,
    safetensors_bytes,
    weight_arrays,
    zip_names,
)
from kernel_cases import SMALL

from app.core.digest import tensor_digest
from app.reference.validation import validate

OPS = list(SMALL)


def _check_zip(tmp_path, content: bytes, name: str = "k") -> dict:
    path = tmp_path / f"{name}.zip"
    path.write_bytes(content)
    report = validate(path)
    assert report.ops > 0
    return kernel_json(content)


def test_ops_lists_the_catalog(client):
    ops = client.get("/v1/ops").json()
    assert [o["name"] for o in ops] == OPS
    conv = ops[0]
    assert conv["parameters"]["properties"]["in_channels"]["minimum"] == 1
    assert conv["weights"][0] == {
        "name": "weight",
        "shape": "[out_channels, in_channels] or [out_channels, in_channels, 1, 1]",
        "required": "always",
    }
    assert conv["inputs"][0]["name"] == "x" and conv["outputs"][0]["name"] == "y"


@pytest.mark.parametrize("op", OPS)
def test_json_request_per_op(client, tmp_path, op):
    params = SMALL[op]
    weights = weight_arrays(op, params, seed=1)
    body = {"op": op, **params, "weights": {k: v.tolist() for k, v in weights.items()}}
    r = client.post("/v1/kernels", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/zip"
    assert r.headers["content-disposition"] == f'attachment; filename="{op}.mlpackage.zip"'
    assert r.headers["etag"].startswith('"sha256:')
    desc = _check_zip(tmp_path, r.content)
    assert desc["op"] == op and desc["params"] == {**desc["params"], **params}
    for name, array in weights.items():
        assert desc["weights"][name]["sha256"] == tensor_digest(array)


@pytest.mark.parametrize("op", OPS)
def test_multipart_request_per_op(client, tmp_path, op):
    params = SMALL[op]
    weights = weight_arrays(op, params, seed=2)
    files = {"spec": (None, json.dumps({**params, "target": "ios18"}), "application/json")}
    files |= {k: (f"{k}.npy", npy_bytes(v), "application/x-npy") for k, v in weights.items()}
    r = client.post(f"/v1/kernels/{op}", files=files)
    assert r.status_code == 200, r.text
    desc = _check_zip(tmp_path, r.content)
    assert {k: v["sha256"] for k, v in desc["weights"].items()} == {
        k: tensor_digest(v) for k, v in weights.items()
    }


def test_multipart_parts_serve_their_request_only(server, client):
    """A file part is spooled for its request and removed after it: nothing is kept in the blob
    store (a tensor meant for reuse goes to /v1/blobs) and no spool file is left behind."""
    w = np.full((3, 5), 0.25, np.float32)
    files = {
        "spec": (None, json.dumps({"in_channels": 5, "out_channels": 3, "spatial": 2})),
        "weight": ("w.npy", npy_bytes(w)),
    }
    r = client.post("/v1/kernels/conv", files=files)
    assert r.status_code == 200, r.text
    assert client.head(f"/v1/blobs/{tensor_digest(w)}").status_code == 404
    spools = list((server.data_dir / "blobs" / "tmp").iterdir())
    assert spools == []


def test_mil_format_and_ios17(client, tmp_path):
    params = {"in_channels": 4, "out_channels": 8, "spatial": 2, "bias": True}
    weights = weight_arrays("conv", params, seed=3)
    body = {
        **params,
        "format": "mil",
        "target": "ios17",
        "name": "proj",
        "weights": {k: v.tolist() for k, v in weights.items()},
    }
    r = client.post("/v1/kernels/conv", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-disposition"].endswith('filename="proj.mil.zip"')
    assert "model.mil" in zip_names(r.content)
    assert _check_zip(tmp_path, r.content)["target"] == "ios17"


def test_multipart_safetensors_and_raw_parts(client, tmp_path):
    params = {"in_channels": 8, "out_channels": 4, "spatial": 3, "bias": True}
    w = weight_arrays("conv", params, seed=4)
    raw_bias = w["bias"].astype("<f2")
    files = {
        "spec": (None, json.dumps({**params, "weights": {"bias": {"dtype": "float16"}}})),
        "weight": (
            "w.safetensors",
            safetensors_bytes({"weight": w["weight"]}),
            "application/octet-stream",
        ),
        "bias": ("bias.bin", raw_bias.tobytes(), "application/octet-stream"),
    }
    r = client.post("/v1/kernels/conv", files=files)
    assert r.status_code == 200, r.text
    desc = _check_zip(tmp_path, r.content)
    assert desc["weights"]["weight"]["sha256"] == tensor_digest(w["weight"])
    assert desc["weights"]["bias"]["dtype"] == "float16"
    assert desc["weights"]["bias"]["sha256"] == tensor_digest(raw_bias)


def test_blob_upload_then_reference_by_digest(client, tmp_path):
    w = np.random.default_rng(5).standard_normal((16, 4)).astype(np.float32)
    digest = tensor_digest(w)
    assert client.head(f"/v1/blobs/{digest}").status_code == 404
    r = client.post("/v1/blobs", files={"file": ("w.npy", npy_bytes(w))})
    assert r.status_code == 201, r.text
    assert r.json() == {"digest": digest, "dtype": "float32", "shape": [16, 4], "bytes": w.nbytes}
    # The same tensor as raw bytes and as safetensors: same digest, already stored.
    raw = client.post(
        "/v1/blobs?dtype=float32&shape=16,4",
        content=w.tobytes(),
        headers={"content-type": "application/octet-stream"},
    )
    assert raw.status_code == 200 and raw.json()["digest"] == digest
    st = client.post("/v1/blobs", content=safetensors_bytes({"t": w}))
    assert st.status_code == 200 and st.json()["digest"] == digest
    assert client.head(f"/v1/blobs/{digest}").status_code == 200
    assert client.head(f"/v1/blobs/{digest.removeprefix('sha256:')}").status_code == 200
    assert client.get(f"/v1/blobs/{digest}").json()["shape"] == [16, 4]

    body = {"in_features": 4, "out_features": 16, "tokens": 3, "weights": {"weight": digest}}
    r = client.post("/v1/kernels/matmul", json=body)
    assert r.status_code == 200, r.text
    assert _check_zip(tmp_path, r.content)["weights"]["weight"]["sha256"] == digest


def test_etag_304_and_cache_hit_bytes(client):
    body = {"op": "scale", "channels": 3, "spatial": 5, "weights": {"scale": [1.5, 2.0, -1.0]}}
    first = client.post("/v1/kernels", json=body)
    second = client.post("/v1/kernels", json=body)
    assert first.status_code == second.status_code == 200
    assert second.headers["x-cache"] == "hit"
    assert first.content == second.content
    assert first.headers["etag"] == second.headers["etag"]
    not_modified = client.post(
        "/v1/kernels", json=body, headers={"if-none-match": first.headers["etag"]}
    )
    assert not_modified.status_code == 304 and not_modified.content == b""
    other = client.post("/v1/kernels", json=body, headers={"if-none-match": '"sha256:00"'})
    assert other.status_code == 200 and other.content == first.content


def test_bypass_cache_rebuilds_the_same_bytes(client):
    body = {"channels": 4, "spatial": 2, "weights": {"scale": [1.0, 2.0, 3.0, 4.0]}}
    first = client.post("/v1/kernels/scale", json=body)
    again = client.post("/v1/kernels/scale?bypass_cache=true", json=body)
    again_body = client.post("/v1/kernels/scale", json={**body, "bypass_cache": True})
    assert again.headers["x-cache"] == again_body.headers["x-cache"] == "miss"
    assert first.content == again.content == again_body.content


def test_corrupted_cache_entry_is_detected_and_rebuilt(client, server):
    body = {"channels": 5, "spatial": 2, "weights": {"scale": [1.0, 2.0, 3.0, 4.0, 5.0]}}
    first = client.post("/v1/kernels/scale", json=body)
    digest = first.headers["etag"].strip('"')
    (meta,) = [
        p
        for p in (server.data_dir / "artifacts").glob("??/*.json")
        if json.loads(p.read_text())["digest"] == digest
    ]
    zip_path = meta.with_suffix(".zip")
    data = bytearray(zip_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    zip_path.write_bytes(bytes(data))
    corrupt_before = metric(client, "ane_cache_corrupt_total")
    again = client.post("/v1/kernels/scale", json=body)
    assert again.status_code == 200
    assert again.headers["x-cache"] == "miss"
    assert again.content == first.content
    assert metric(client, "ane_cache_corrupt_total") == corrupt_before + 1


def test_twenty_concurrent_identical_requests_build_once(client, server):
    params = {"in_channels": 64, "out_channels": 64, "spatial": 16}
    w = weight_arrays("conv", params, seed=20)["weight"]
    body = {**params, "weights": {"weight": w.tolist()}}
    builds_before = metric(client, "ane_builds_total", op="conv")

    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as ac:
            return await asyncio.gather(
                *(ac.post("/v1/kernels/conv", json=body) for _ in range(20))
            )

    responses = asyncio.run(fire())
    assert all(r.status_code == 200 for r in responses)
    assert len({r.content for r in responses}) == 1
    assert sorted(r.headers["x-cache"] for r in responses) == ["hit"] * 19 + ["miss"]
    assert metric(client, "ane_builds_total", op="conv") == builds_before + 1


@pytest.mark.slow
def test_mlmodelc_without_compiler_is_503_naming_formats(tmp_path):
    body = {"channels": 2, "spatial": 2, "format": "mlmodelc"}
    with uvicorn_server(tmp_path / "data", compiler="none") as url, httpx.Client(base_url=url) as c:
        problem = assert_problem(c.post("/v1/kernels/identity", json=body), 503, "format")
        assert problem["available_formats"] == ["mlpackage", "mil", "aimodel"]
        assert "mlpackage" in problem["detail"] and "ANE_COMPILER=none" in problem["detail"]
        assert c.get("/v1/info").json()["formats"] == ["mlpackage", "mil", "aimodel"]


def test_request_id_is_echoed_or_made(client):
    assert (
        client.get("/healthz", headers={"x-request-id": "abc-123"}).headers["x-request-id"]
        == "abc-123"
    )
    assert len(client.get("/healthz").headers["x-request-id"]) == 32


def test_info_ready_and_metrics(client):
    info = client.get("/v1/info").json()
    # the linux backend, no Mac; coreai-core installed (the coreai extra)
    assert info["formats"] == ["mlpackage", "mil", "mlmodelc", "aimodel"]
    assert info["compiler"]["available"] is True and info["compiler"]["name"] == "linux"
    assert set(info["versions"]) == {"service", "generator", "coremltools", "python"}
    assert client.get("/readyz").json() == {"status": "ready"}
    client.post("/v1/kernels/identity", json={"channels": 2, "spatial": 3})
    text = client.get("/metrics").text
    for name in (
        "ane_http_requests_total",
        "ane_http_request_duration_seconds_bucket",
        "ane_cache_hits_total",
        "ane_cache_misses_total",
        "ane_build_seconds_bucket",
        "ane_http_request_bytes_total",
        "ane_http_response_bytes_total",
        "ane_builds_in_flight",
    ):
        assert name in text, name
    assert 'route="/v1/kernels/{op}"' in text and 'op="identity"' in text


def test_verify_adds_verification_json(client, tmp_path):
    params = {"in_channels": 8, "out_channels": 4, "spatial": 3}
    w = weight_arrays("conv", params, seed=30)
    body = {**params, "weights": {k: v.tolist() for k, v in w.items()}}
    plain = client.post("/v1/kernels/conv", json=body)
    verified = client.post("/v1/kernels/conv", json={**body, "verify": True})
    assert plain.status_code == verified.status_code == 200, verified.text
    assert "verification.json" not in zip_names(plain.content)
    assert "verification.json" in zip_names(verified.content)
    assert plain.headers["etag"] != verified.headers["etag"]  # verify is part of the cache key
    with zipfile.ZipFile(io.BytesIO(verified.content)) as zf:
        report = json.loads(zf.read("verification.json"))
    assert report["op"] == "conv" and report["passed"] is True
    _check_zip(tmp_path, verified.content)
