"""Every build the API process asks for runs in its build pool's worker processes, never in the
API process itself (a build on a thread there holds the GIL against the event loop): a live
server with a watch on its build steps (tests/build_watch.py) serves each kind of build, and
the watch must see none of them run in the server's process."""

import asyncio
import io
import time
import zipfile

import httpx
import numpy as np
import pytest
from build_watch import watching
from conftest import uvicorn_server

from app.artifacts import prepare
from app.request import KernelRequest

WATCH = "tests/build_watch.py"
CONV = {"op": "conv", "in_channels": 2, "out_channels": 2, "spatial": 4}
W = [[1.0, 0.0], [0.0, 1.0]]


def _steps_run(log) -> list[str]:
    """The build steps the watch saw, after its opening line (which proves it was installed)."""
    first, *seen = log.read_text().splitlines()
    assert first.startswith("watching ") and "app.artifacts.prepare" in first
    return seen


def _finished(client: httpx.Client, job_id: str) -> dict:
    deadline = time.monotonic() + 120
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def _zip_names(content: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        return zf.namelist()


def test_the_watch_sees_a_build_run_in_a_thread(tmp_path):
    """The watch itself: what `asyncio.to_thread(build)` in the server would do is written."""
    log = tmp_path / "watch.log"
    request = KernelRequest.create(
        "conv",
        {k: v for k, v in CONV.items() if k != "op"},
        {"weight": np.asarray(W, np.float32)},
        format="mil",
    )
    with watching(log):
        asyncio.run(asyncio.to_thread(prepare, request))
    assert [line.split("\t")[0] for line in _steps_run(log)] == ["app.artifacts.prepare"]


@pytest.mark.slow
def test_no_build_runs_in_the_api_process(tmp_path, monkeypatch):
    log = tmp_path / "watch.log"
    monkeypatch.setenv("BUILD_WATCH_LOG", str(log))
    monkeypatch.delenv("ANE_COMPILER", raising=False)  # this machine's own: the linux backend
    monkeypatch.delenv("ANE_REDIS_URL", raising=False)  # jobs run in the API process
    body = {**CONV, "weights": {"weight": W}}
    with (
        uvicorn_server(tmp_path / "data", launcher=[WATCH], workers="1") as url,
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        sync = client.post("/v1/kernels", json={**body, "format": "mil"})
        assert sync.status_code == 200 and sync.headers["x-cache"] == "miss", sync.text
        again = client.post("/v1/kernels?bypass_cache=true", json={**body, "format": "mil"})
        assert again.status_code == 200 and again.headers["x-cache"] == "miss"
        verified = client.post("/v1/kernels", json={**body, "format": "mlpackage", "verify": True})
        assert "verification.json" in _zip_names(verified.content)
        compiled = client.post("/v1/kernels", json={**body, "format": "mlmodelc", "name": "sync"})
        if compiled.status_code == 202:  # a compile that outlived ANE_SYNC_WAIT_S
            done = _finished(client, compiled.json()["id"])
            compiled = client.get(f"/v1/jobs/{done['id']}/artifact")
        assert compiled.status_code == 200, compiled.text
        assert "sync.mlmodelc/model.mil" in _zip_names(compiled.content)
        for fmt in ("mlpackage", "mlmodelc"):
            job = client.post("/v1/jobs", json={**body, "format": fmt, "name": f"job_{fmt}"})
            assert job.status_code == 202, job.text
            done = _finished(client, job.json()["id"])
            assert done["state"] == "succeeded", done
            artifact = client.get(f"/v1/jobs/{done['id']}/artifact")
            assert f"job_{fmt}.{fmt}/" in " ".join(_zip_names(artifact.content))
    assert _steps_run(log) == []
