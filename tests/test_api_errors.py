"""Bad requests get the right 4xx problem+json naming the field, and the server keeps serving."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import SERVER_LIMITS, uvicorn_server
from http_support import assert_problem, npy_bytes, safetensors_bytes

from app.errors import BodyError, ErrorKind, RequestError, ServiceError

CONV = {"in_channels": 2, "out_channels": 3, "spatial": 4}
GOOD_W = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
JSON_LIMIT = int(SERVER_LIMITS["max_json_bytes"])
WEIGHT_LIMIT = int(SERVER_LIMITS["max_weight_bytes"])
UNKNOWN = "sha256:" + "ab" * 32


def _spec(extra=None, **params):
    return (None, json.dumps({**CONV, **params, **(extra or {})}), "application/json")


def _nan_npy() -> bytes:
    w = np.full((3, 2), 0.5, np.float32)
    w[1, 1] = np.nan
    return npy_bytes(w)


def _truncated_checkpoint() -> bytes:
    """A safetensors file of two tensors (stored whole, as a checkpoint) missing its last bytes."""
    return safetensors_bytes({"a": np.zeros(2, np.float32), "b": np.ones(2, np.float32)})[:-4]


# (id, method, url, request kwargs, status, field, a phrase the detail must contain)
CASES = [
    (
        "malformed-json",
        "POST",
        "/v1/kernels/conv",
        {"content": b'{"in_channels": ', "headers": {"content-type": "application/json"}},
        400,
        None,
        "not valid JSON",
    ),
    ("json-array-body", "POST", "/v1/kernels/conv", {"json": [1, 2]}, 422, None, "JSON object"),
    (
        "bypass-cache-not-a-bool",
        "POST",
        "/v1/kernels/conv?bypass_cache=maybe",
        {"json": {**CONV, "weights": {"weight": GOOD_W}}},
        422,
        "query.bypass_cache",
        "boolean",
    ),
    (
        "wrong-type",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "in_channels": "many"}},
        422,
        "in_channels",
        "integer",
    ),
    (
        "negative-dim",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "spatial": -4}},
        422,
        "spatial",
        "greater than or equal to 1",
    ),
    (
        "huge-dim",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "out_channels": 10**6}},
        422,
        "out_channels",
        "16384",
    ),
    (
        "unknown-param",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "colour": "red"}},
        422,
        "colour",
        "Extra inputs",
    ),
    ("unknown-op-path", "POST", "/v1/kernels/fft", {"json": {}}, 404, "op", "catalog has"),
    ("unknown-op-body", "POST", "/v1/kernels", {"json": {"op": "fft"}}, 404, "op", "fft"),
    ("missing-op-body", "POST", "/v1/kernels", {"json": CONV}, 422, "op", "op"),
    (
        "op-contradicts-path",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "op": "matmul"}},
        422,
        "op",
        "contradicts",
    ),
    (
        "wrong-weight-shape",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": [[1.0, 2.0, 3.0]]}}},
        422,
        "weights.weight",
        "expected shape [3, 2, 1, 1] or [3, 2]",
    ),
    (
        "missing-weight",
        "POST",
        "/v1/kernels/conv",
        {"json": CONV},
        422,
        "weights.weight",
        "missing weight",
    ),
    (
        "unknown-weight",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": GOOD_W, "gamma": [1.0]}}},
        422,
        "weights.gamma",
        "unknown weight",
    ),
    (
        "ragged-inline-weight",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": [[1.0, 2.0], [3.0]]}}},
        422,
        "weights.weight",
        "rectangular",
    ),
    (
        "string-inline-weight",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": [["a", "b"]]}}},
        422,
        "weights.weight",
        "numbers",
    ),
    (
        "fp16-overflow-weight",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": [[1e6, 0.0], [0.0, 0.0], [0.0, 0.0]]}}},
        422,
        "weights.weight",
        "fp16",
    ),
    (
        "nan-literal-inline-weight",
        "POST",
        "/v1/kernels/conv",
        {
            "content": json.dumps(
                {**CONV, "weights": {"weight": [[float("nan"), 0], [0, 0], [0, 0]]}}
            ),
            "headers": {"content-type": "application/json"},
        },
        422,
        "weights.weight",
        "NaN",
    ),
    (
        "nan-weight-npy",
        "POST",
        "/v1/kernels/conv",
        {"files": {"spec": _spec(), "weight": ("w.npy", _nan_npy())}},
        422,
        "weights.weight",
        "NaN",
    ),
    (
        "truncated-npy",
        "POST",
        "/v1/kernels/conv",
        {
            "files": {
                "spec": _spec(),
                "weight": ("w.npy", npy_bytes(np.zeros((3, 2), np.float32))[:-5]),
            }
        },
        422,
        "weights.weight",
        "truncated",
    ),
    (
        "wrong-part-name",
        "POST",
        "/v1/kernels/conv",
        {"files": {"spec": _spec(), "wieght": ("w.npy", npy_bytes(np.zeros((3, 2), np.float32)))}},
        422,
        "wieght",
        "one file part per weight",
    ),
    (
        "multipart-without-spec",
        "POST",
        "/v1/kernels/conv",
        {"files": {"weight": ("w.npy", npy_bytes(np.zeros((3, 2), np.float32)))}},
        422,
        "spec",
        "spec",
    ),
    (
        "spec-not-json",
        "POST",
        "/v1/kernels/conv",
        {"files": {"spec": (None, b"{nope")}},
        400,
        None,
        "spec part",
    ),
    (
        "raw-part-size-mismatch",
        "POST",
        "/v1/kernels/conv",
        {"files": {"spec": _spec(), "weight": ("w.bin", b"\x00" * 7)}},
        422,
        "weights.weight",
        "bytes",
    ),
    (
        "weight-given-twice",
        "POST",
        "/v1/kernels/conv",
        {
            "files": {
                "spec": _spec({"weights": {"weight": GOOD_W}}),
                "weight": ("w.npy", npy_bytes(np.zeros((3, 2), np.float32))),
            }
        },
        422,
        "weights.weight",
        "twice",
    ),
    (
        "raw-descriptor-without-part",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": {"dtype": "float32"}}}},
        422,
        "weights.weight",
        "no multipart part",
    ),
    (
        "unknown-digest",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": UNKNOWN}}},
        422,
        "weights.weight",
        "/v1/blobs",
    ),
    (
        "malformed-digest",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": "sha256:xyz"}}},
        422,
        "weights.weight",
        "digest",
    ),
    (
        "oversize-json-body",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "weights": {"weight": [[0.0] * (JSON_LIMIT // 4)] * 3}}},
        413,
        None,
        str(JSON_LIMIT),
    ),
    (
        "oversize-weight-part",
        "POST",
        "/v1/kernels/conv",
        {"files": {"spec": _spec(), "weight": ("w.bin", b"\x00" * (WEIGHT_LIMIT + 1))}},
        413,
        "weight",
        str(WEIGHT_LIMIT),
    ),
    (
        "text-plain",
        "POST",
        "/v1/kernels/conv",
        {"content": b"in_channels=2", "headers": {"content-type": "text/plain"}},
        415,
        None,
        "text/plain",
    ),
    ("no-content-type", "POST", "/v1/kernels/conv", {"content": b"{}"}, 415, None, "(none)"),
    (
        "multipart-no-boundary",
        "POST",
        "/v1/kernels/conv",
        {"content": b"--x\r\n", "headers": {"content-type": "multipart/form-data"}},
        400,
        None,
        "boundary",
    ),
    (
        "unknown-format",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "format": "onnx"}},
        422,
        "format",
        "mlpackage",
    ),
    (
        "unknown-target",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "target": "ios16"}},
        422,
        "target",
        "ios18",
    ),
    (
        "bad-name",
        "POST",
        "/v1/kernels/conv",
        {"json": {**CONV, "name": "1 bad"}},
        422,
        "name",
        "pattern",
    ),
    (
        "causal-short-kv",
        "POST",
        "/v1/kernels/sdpa",
        {"json": {"n_heads": 1, "head_dim": 4, "seq_len": 4, "kv_seq_len": 2, "causal": True}},
        422,
        None,
        "kv_seq_len >= seq_len",
    ),
    (
        "gqa-not-multiple",
        "POST",
        "/v1/kernels/gqa_expand",
        {"json": {"kv_heads": 3, "q_heads": 4, "head_dim": 2, "seq_len": 1}},
        422,
        None,
        "multiple",
    ),
    (
        "state-on-ios17",
        "POST",
        "/v1/kernels/read_state",
        {"json": {"shape": [4], "target": "ios17"}},
        422,
        "target",
        "ios17",
    ),
    (
        "blob-raw-without-dtype",
        "POST",
        "/v1/blobs",
        {"content": b"\x00" * 8, "headers": {"content-type": "application/octet-stream"}},
        422,
        "file",
        "dtype and a shape",
    ),
    ("blob-json-content-type", "POST", "/v1/blobs", {"json": [1.0, 2.0]}, 415, None, "multipart"),
    (
        "blob-wrong-part-name",
        "POST",
        "/v1/blobs",
        {"files": {"data": ("w.npy", b"x")}},
        422,
        "file",
        "named `file`",
    ),
    (
        "blob-truncated-checkpoint",
        "POST",
        "/v1/blobs",
        {"content": _truncated_checkpoint()},
        422,
        "file",
        "byte range",
    ),
    (
        "blob-bad-dtype",
        "POST",
        "/v1/blobs?dtype=complex64&shape=2",
        {"content": b"\x00" * 16},
        422,
        "query.dtype",
        "complex64",
    ),
    (
        "blob-bad-shape",
        "POST",
        "/v1/blobs?dtype=float32&shape=2,-1",
        {"content": b"\x00" * 8},
        422,
        "query.shape",
        "positive integers",
    ),
    ("blob-unknown", "GET", f"/v1/blobs/{UNKNOWN}", {}, 404, "path.digest", "no blob"),
    ("blob-malformed-digest", "GET", "/v1/blobs/sha256:zz", {}, 422, "path.digest", "pattern"),
    (
        "artifact-too-large",
        "POST",
        "/v1/kernels/identity",
        {"json": {"channels": 4096, "spatial": 1}},
        413,
        "weights",
        SERVER_LIMITS["max_artifact_bytes"],
    ),
    ("wrong-method", "GET", "/v1/kernels/conv", {}, 405, None, "GET"),
    ("unknown-route", "GET", "/v2/ops", {}, 404, None, "/v2/ops"),
]


@pytest.mark.parametrize(
    ("method", "url", "kwargs", "status", "field", "phrase"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_request(client, method, url, kwargs, status, field, phrase):
    problem = assert_problem(client.request(method, url, **kwargs), status, field)
    assert phrase in problem["detail"], problem
    if status == 413:
        assert problem["limit"] == int(phrase)
    # The server keeps serving after every bad request.
    assert client.get("/healthz").status_code == 200


def test_enough_distinct_bad_requests():
    assert len({c[0] for c in CASES}) == len(CASES) >= 25


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"content": b"--x\r\n", "headers": {"content-type": "multipart/form-data"}}, 400),
        (
            {"content": b"[" * (JSON_LIMIT + 1), "headers": {"content-type": "application/json"}},
            413,
        ),
    ],
    ids=["framing", "body-size"],
)
def test_a_fault_of_the_whole_body_names_no_field(client, kwargs, status):
    problem = assert_problem(client.post("/v1/kernels/conv", **kwargs), status)
    assert "field" not in problem and "errors" not in problem, problem


@pytest.mark.parametrize(
    "error",
    [
        RequestError("weights.bias", "not a vector", title="Invalid weight", limit=3),
        BodyError("the multipart body ends in the middle of a part"),
        BodyError("the JSON body is too large", kind=ErrorKind.TOO_LARGE, limit=10),
        ServiceError("all workers busy", kind=ErrorKind.UNAVAILABLE, retry_after=2.0, cause="x"),
    ],
)
def test_errors_cross_processes_as_they_are(error):
    """Build workers and job records hand errors back pickled: type and members intact."""
    again = pickle.loads(pickle.dumps(error))
    members = ("field", "message", "kind", "title", "retry_after", "extra")
    assert type(again) is type(error) and str(again) == str(error)
    assert [getattr(again, m) for m in members] == [getattr(error, m) for m in members]


def test_shape_error_names_weight_expected_and_received(client):
    body = {**CONV, "weights": {"weight": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]}}
    problem = assert_problem(client.post("/v1/kernels/conv", json=body), 422, "weights.weight")
    assert "expected shape [3, 2, 1, 1]" in problem["detail"]
    assert "received [2, 3]" in problem["detail"]


def test_head_of_unknown_blob_is_404(client):
    assert client.head(f"/v1/blobs/{UNKNOWN}").status_code == 404


def test_rejected_requests_leave_nothing_half_written(client, server):
    client.post("/v1/kernels/conv", files={"spec": _spec(), "weight": ("w.npy", _nan_npy())})
    client.post("/v1/kernels/conv", files={"spec": _spec(), "wieght": ("w.npy", b"\x93NUMPY")})
    client.post("/v1/blobs", content=b"\x00" * 3)
    client.post("/v1/kernels/identity", json={"channels": 4096, "spatial": 2})  # 413 in a worker
    for tmp in (server.data_dir / "blobs" / "tmp", server.data_dir / "artifacts" / "tmp"):
        assert [p.name for p in tmp.iterdir()] == [], tmp


@pytest.mark.slow
def test_backlog_full_answers_503_with_retry_after(tmp_path):
    """One worker and no backlog: of several concurrent distinct builds, the ones arriving while
    the worker is busy are refused instead of queued."""
    with uvicorn_server(tmp_path / "data", workers="1", max_backlog="0") as base:

        async def fire() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base, timeout=120) as ac:
                return await asyncio.gather(
                    *(
                        ac.post("/v1/kernels/identity", json={"channels": 2048 + i, "spatial": 1})
                        for i in range(6)
                    )
                )

        responses = asyncio.run(fire())
        statuses = sorted(r.status_code for r in responses)
        assert 200 in statuses and 503 in statuses, statuses
        refused = next(r for r in responses if r.status_code == 503)
        assert_problem(refused, 503)
        assert refused.headers["retry-after"] == "2"
        assert httpx.get(f"{base}/healthz").status_code == 200


@pytest.mark.slow
def test_api_keys(tmp_path):
    with (
        uvicorn_server(tmp_path / "data", api_keys="k-one, k-two") as base,
        httpx.Client(base_url=base, timeout=60) as c,
    ):
        assert_problem(c.get("/v1/ops"), 401)
        assert_problem(c.get("/v1/ops", headers={"authorization": "Bearer nope"}), 401)
        assert c.get("/v1/ops", headers={"authorization": "Bearer k-two"}).status_code == 200
        assert c.get("/healthz").status_code == 200  # probes stay open
        r = c.post(
            "/v1/kernels/identity",
            json={"channels": 2, "spatial": 2},
            headers={"authorization": "Bearer k-one"},
        )
        assert r.status_code == 200
        refused = c.post("/v1/kernels/identity", json={"channels": 2, "spatial": 2})
        assert_problem(refused, 401)
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.headers["x-request-id"]  # refusals are logged like any request
        assert c.head(f"/v1/blobs/{'0' * 64}").status_code == 401
        for open_path in ("/v1/info", "/readyz", "/metrics", "/docs", "/openapi.json"):
            assert c.get(open_path).status_code == 200, open_path
        paths = c.get("/openapi.json").json()["paths"]
        assert paths["/v1/kernels/{op}"]["post"]["security"] == [{"bearer": []}]
        assert "security" not in paths["/v1/info"]["get"]
    log = next(tmp_path.glob("uvicorn-*.log")).read_text()
    assert "request" in log and "k-one" not in log and "k-two" not in log


def _build_workers(port: str) -> list[int]:
    """The pids of the build worker processes of the server listening on `port`."""
    needle = f"--port\0{port}\0".encode()
    server = next(
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and needle in _read(p / "cmdline")
    )
    children = _read(Path(f"/proc/{server}/task/{server}/children")).split()
    return [int(c) for c in children if b"spawn_main" in _read(Path(f"/proc/{int(c)}/cmdline"))]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
def test_a_dead_build_worker_is_replaced(tmp_path):
    with uvicorn_server(tmp_path / "data", workers="2") as base:
        port = base.rsplit(":", 1)[1]
        deadline = time.monotonic() + 30
        while len(workers := _build_workers(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 2
        # One build first: it waits for the start-up warm-up, so the kill finds both idle.
        assert (
            httpx.post(
                f"{base}/v1/kernels/identity", json={"channels": 2, "spatial": 1}, timeout=60
            ).status_code
            == 200
        )
        os.kill(workers[0], signal.SIGKILL)
        while len(after := _build_workers(port)) < 2 or workers[0] in after:
            assert time.monotonic() < deadline, after
            time.sleep(0.1)
        for i in range(4):  # every build still runs, on the survivor or the replacement
            r = httpx.post(f"{base}/v1/kernels/identity", json={"channels": 3 + i, "spatial": 1})
            assert r.status_code == 200, r.text
    assert "a build worker died" in next(tmp_path.glob("uvicorn-*.log")).read_text()


def test_a_misspelt_field_is_named_in_the_headline(client):
    """The trial's conv with `in_channel` and `spacial`: "field required" alone read as "but I
    sent it"; the headline names what was sent instead."""
    body = {"in_channel": 4, "out_channels": 4, "spacial": 4, "weights": {"weight": GOOD_W}}
    r = client.post("/v1/kernels/conv", json=body)
    assert r.status_code == 422
    problem = r.json()
    assert problem["field"] == "in_channels"
    assert problem["detail"] == (
        "in_channels: field required; got in_channel (did you mean in_channels?), "
        "spacial (did you mean spatial?), not fields here (and 1 more)"
    )
    assert {e["field"] for e in problem["errors"]} >= {"in_channels", "spatial", "in_channel"}
