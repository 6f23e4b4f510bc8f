"""/v1/jobs, /v1/batches, /v1/workers over HTTP against a live uvicorn server: first with the
embedded engine (the `make run` default) compiling with the labelled stand-in xcrun, then as a
farm (Redis + a real `ane-kernels worker` process) through an API restart."""

import io
import json
import os
import time
import zipfile

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from http_support import assert_problem, npy_bytes
from jobs_support import (
    FAKE_XCRUN,
    WorkerProcess,
    environ,
    redis_server,
    worker_env,
    xcrun_events,
)

CONV = {"op": "conv", "in_channels": 2, "out_channels": 2, "spatial": 4}
W = [[1.0, 0.0], [0.0, 1.0]]


def wait_done(client, job_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """A server whose PATH has the stand-in xcrun: the embedded engine and the synchronous path
    both compile with it."""
    root = tmp_path_factory.mktemp("jobs-api")
    log = root / "xcrun.log"
    with environ(
        PATH=f"{FAKE_XCRUN}{os.pathsep}{os.environ['PATH']}",
        FAKE_XCRUN_LOG=str(log),
        FAKE_XCRUN_FAIL="bad",
    ):
        server = uvicorn_server(root / "data")
        url = server.__enter__()
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            yield client, log
    finally:
        server.__exit__(None, None, None)


def test_submit_poll_download_an_mlmodelc_job(embedded):
    client, log = embedded
    answer = client.post("/v1/jobs", json={**CONV, "format": "mlmodelc", "weights": {"weight": W}})
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["state"] in ("queued", "generating", "compiling", "succeeded")
    assert job["request"]["format"] == "mlmodelc" and "inline" not in job["request"]["weights"]
    done = wait_done(client, job["id"])
    assert done["state"] == "succeeded", done
    assert list(done["stages"]) == ["queued", "generating", "compiling", "succeeded"]
    art = client.get(f"/v1/jobs/{job['id']}/artifact")
    assert art.status_code == 200 and art.headers["content-type"] == "application/zip"
    assert art.headers["etag"] == f'"{done["artifact"]["digest"]}"'
    assert 'filename="conv.mlmodelc.zip"' in art.headers["content-disposition"]
    # answered as /v1/kernels answers: the preflight's summary, and 304 for an ETag it names
    assert art.headers["x-ane-preflight"] == done["artifact"]["preflight"]
    assert art.headers["x-ane-preflight"].startswith("error=0 warning=")
    unchanged = client.get(
        f"/v1/jobs/{job['id']}/artifact", headers={"If-None-Match": art.headers["etag"]}
    )
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert unchanged.headers["etag"] == art.headers["etag"]
    other = client.get(f"/v1/jobs/{job['id']}/artifact", headers={"If-None-Match": '"sha256:0"'})
    assert other.status_code == 200 and other.content == art.content
    with zipfile.ZipFile(io.BytesIO(art.content)) as zf:
        names = zf.namelist()
        kernel = json.loads(zf.read("kernel.json"))
    assert "conv.mlmodelc/model.mil" in names and "compile.log" in names
    assert kernel["compiler"]["toolchain"]["macos_build"] == "24A335-STAND-IN"
    # the same request again is the same job: no second compile
    again = client.post("/v1/jobs", json={**CONV, "format": "mlmodelc", "weights": {"weight": W}})
    assert again.json()["id"] == job["id"] and again.json()["state"] == "succeeded"
    assert len(xcrun_events(log, "conv", "start")) == 1


def test_a_compiler_error_is_the_jobs_error_and_there_is_no_artifact(embedded):
    client, _ = embedded
    body = {**CONV, "format": "mlmodelc", "name": "bad", "weights": {"weight": W}}
    job = wait_done(client, client.post("/v1/jobs", json=body).json()["id"])
    assert job["state"] == "failed" and job["error"]["kind"] == "compiler"
    assert "Failed to parse the model specification" in job["error"]["message"]
    assert_problem(client.get(f"/v1/jobs/{job['id']}/artifact"), 409)
    cancelled = client.delete(f"/v1/jobs/{job['id']}")  # finished: stays as it was
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "failed"
    failed = client.get("/v1/jobs", params={"state": "failed"}).json()["jobs"]
    assert [j["id"] for j in failed] == [job["id"]]


def test_batches_and_their_errors_name_the_kernel(embedded):
    client, _ = embedded
    kernels = [{**CONV, "format": "mil", "name": f"k{i}", "weights": {"weight": W}} for i in (1, 2)]
    answer = client.post("/v1/jobs", json={"kernels": kernels})
    assert answer.status_code == 202
    batch = answer.json()
    assert len(batch["jobs"]) == 2
    for job in batch["jobs"]:
        wait_done(client, job["id"])
    later = client.get(f"/v1/batches/{batch['id']}").json()
    assert later["state"] == "succeeded" and later["counts"]["succeeded"] == 2

    bad = [kernels[0], {**kernels[1], "in_channels": 0}]
    assert_problem(client.post("/v1/jobs", json={"kernels": bad}), 422, "kernels.1.in_channels")
    assert_problem(client.post("/v1/jobs", json={"kernels": []}), 422, "kernels")
    assert_problem(client.get("/v1/batches/" + "0" * 64), 404)


def test_multipart_jobs_and_unknown_jobs(embedded):
    client, _ = embedded
    w = np.eye(2, dtype=np.float32) * 3
    spec = json.dumps({**CONV, "format": "mil", "name": "parts"})
    answer = client.post(
        "/v1/jobs", files={"spec": (None, spec), "weight": ("w.npy", npy_bytes(w))}
    )
    assert answer.status_code == 202, answer.text
    job = wait_done(client, answer.json()["id"])
    assert job["state"] == "succeeded"
    assert job["request"]["weights"]["weight"]["shape"] == [2, 2]
    # A job outlives its request: its file part is kept in the blob store.
    digest = job["request"]["weights"]["weight"]["digest"]
    assert client.head(f"/v1/blobs/{digest}").status_code == 200
    assert_problem(client.get("/v1/jobs/nope"), 404, "job_id")
    assert_problem(client.delete("/v1/jobs/nope"), 404, "job_id")
    assert_problem(
        client.post("/v1/jobs", content=b"{", headers={"content-type": "application/json"}), 400
    )


def test_workers_and_the_synchronous_path_use_the_machines_compiler(embedded):
    client, _ = embedded
    workers = client.get("/v1/workers").json()
    assert workers["engine"] == "embedded"
    (worker,) = workers["workers"]
    assert worker["compiler"] == "xcrun" and worker["queue"] == "embedded"
    info = client.get("/v1/info").json()
    assert "mlmodelc" in info["formats"] and info["compiler"]["name"] == "xcrun"
    body = {**CONV, "format": "mlmodelc", "name": "sync", "weights": {"weight": W}}
    sync = client.post("/v1/kernels", json=body)
    assert sync.status_code == 200, sync.text
    with zipfile.ZipFile(io.BytesIO(sync.content)) as zf:
        assert "sync.mlmodelc/model.mil" in zf.namelist()
    assert sync.headers["x-cache"] == "miss"
    repeat = client.post("/v1/kernels", json=body)
    assert repeat.headers["x-cache"] == "hit" and repeat.content == sync.content
    assert (
        client.post(
            "/v1/kernels", json=body, headers={"If-None-Match": sync.headers["etag"]}
        ).status_code
        == 304
    )
    # A compiler error on the synchronous path is a 422 carrying the compiler's own words.
    problem = assert_problem(client.post("/v1/kernels", json={**body, "name": "bad"}), 422)
    assert "Failed to parse the model specification" in problem["detail"] and problem["job"]


@pytest.mark.slow
def test_a_farm_through_http_survives_an_api_restart(tmp_path):
    data_dir, log = tmp_path / "data", tmp_path / "xcrun.log"
    body = {
        **CONV,
        "format": "mlmodelc",
        "placement": True,
        "name": "farm",
        "weights": {"weight": W},
    }
    with redis_server(tmp_path) as url:
        worker = WorkerProcess(
            "ane-macos",
            worker_env(url, data_dir, log, FAKE_XCRUN_SLEEP="farm=1"),
            tmp_path / "w.log",
        )
        try:
            worker.wait_ready(url)
            # The API itself has no compiler (no xcrun on its PATH): the Mac worker compiles, and
            # a synchronous request that outlives ANE_SYNC_WAIT_S answers 202 with its job.
            with (
                uvicorn_server(data_dir, redis_url=url, sync_wait_s="0.2") as api,
                httpx.Client(base_url=api, timeout=60) as client,
            ):
                sync = client.post("/v1/kernels", json=body)
                assert sync.status_code == 202, sync.text
                assert sync.headers["location"] == f"/v1/jobs/{sync.json()['id']}"
                job = client.post("/v1/jobs", json=body).json()
                assert job["id"] == sync.json()["id"]  # the same request is the same job
                assert job["state"] in ("queued", "generating", "compiling")
                workers = client.get("/v1/workers").json()
                info = client.get("/v1/info").json()  # no local compiler, but a Mac in the farm
                assert "mlmodelc" in info["formats"] and info["compiler"]["workers"] == 1
            assert workers["engine"] == "arq"
            assert [w["pid"] for w in workers["workers"]] == [worker.pid]
            with (
                uvicorn_server(data_dir, redis_url=url) as api,  # a new API process
                httpx.Client(base_url=api, timeout=60) as client,
            ):
                done = wait_done(client, job["id"])
                art = client.get(f"/v1/jobs/{job['id']}/artifact")
                again = client.post("/v1/kernels", json=body)  # now a finished job: the zip itself
        finally:
            worker.stop()
    assert done["state"] == "succeeded", done
    assert done["worker"].endswith(f":{worker.pid}")
    assert art.status_code == 200
    with zipfile.ZipFile(io.BytesIO(art.content)) as zf:
        assert "farm.mlmodelc/coremldata.bin" in zf.namelist()
    assert again.status_code == 200 and again.headers["x-cache"] == "hit"
    assert again.content == art.content
