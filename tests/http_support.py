"""Helpers for the HTTP tests: request weights per op, tensor file encodings, metric reading."""

from __future__ import annotations

import io
import re
import zipfile

import httpx
import numpy as np
from safetensors.numpy import save as safetensors_save

from app.kernels import get_op, parse_params

PROBLEM = "application/problem+json"


def weight_arrays(op: str, params: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights in the shapes the op expects (small values, fp16-safe)."""
    kernel = get_op(op)
    rng = np.random.default_rng(seed)
    return {
        s.name: (0.1 * rng.standard_normal(s.shape)).astype(np.float32)
        for s in kernel.weights(parse_params(kernel, params))
    }


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    return safetensors_save(tensors)


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """Sum of a Prometheus sample over series matching `labels` (0 when absent)."""
    text = client.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:{{(.*)}})? (\S+)$", line)
        if not m:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def assert_problem(response: httpx.Response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"]
    if field is not None:
        assert body.get("field") == field, body
    return body


def zip_names(content: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        return zf.namelist()


def kernel_json(content: bytes) -> dict:
    import json

    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        return json.loads(zf.read("kernel.json"))


def job_ended(client: httpx.Client, body: dict) -> dict:
    """Submit `body` to POST /v1/jobs and wait for the job to end (or 30 s): the job."""
    import time

    job = client.post("/v1/jobs", json=body).json()
    for _ in range(600):
        job = client.get(f"/v1/jobs/{job['id']}").json()
        if job["state"] in ("succeeded", "failed"):
            break
        time.sleep(0.05)
    return job


def job_artifact(client: httpx.Client, body: dict) -> tuple[dict, bytes]:
    """Submit `body` to POST /v1/jobs, wait for the job to end, and return it with its zip."""
    job = job_ended(client, body)
    assert job["state"] == "succeeded", job
    return job, client.get(f"/v1/jobs/{job['id']}/artifact").content
