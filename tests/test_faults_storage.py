"""Storage faults on real filesystems under a running uvicorn API: a small tmpfs as the data
volume that uploads, builds and jobs fill up (507 naming the store and the bytes, nothing
half-written left, eviction of cached artifacts before any refusal, /readyz below
ANE_MIN_FREE_BYTES), the same tmpfs remounted read-only (503 naming the directory), and an
immutable directory (chattr +i: EPERM even for root) for permission errors.

Mounting needs root: without it these tests skip, saying so."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from faults_support import (
    access_log,
    fill,
    leftovers,
    log_path,
    remount,
    small_filesystem,
    unaccounted_bytes,
)
from http_support import assert_problem, metric, npy_bytes
from jobs_support import FAKE_XCRUN, environ, eventually

from app.client import Client, InsufficientStorage

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

MiB = 1 << 20
CONV = {"in_channels": 512, "out_channels": 512, "spatial": 16}  # a 1 MiB float32 weight


def weight(seed: int, side: int = 512) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((side, side)).astype(np.float32)


def assert_full(response: httpx.Response, store: str, directory_end: str) -> dict:
    problem = assert_problem(response, 507)
    assert problem["title"] == "Storage full" and problem["store"] == store, problem
    assert problem["directory"].endswith(directory_end), problem
    assert problem["errno"] == "ENOSPC" and store in problem["detail"]
    return problem


def no_500(data_dir, url) -> list[int]:
    statuses = [d["status"] for d in access_log(log_path(data_dir, url))]
    assert 500 not in statuses, statuses
    return statuses


def test_uploads_larger_than_the_volume_are_refused_with_507(tmp_path):
    """The issue's case: a 6 MiB data volume, an 8 MiB .npy posted to /v1/blobs."""
    with small_filesystem(tmp_path / "data", "6m") as data_dir:
        with (
            uvicorn_server(data_dir, min_free_bytes=str(MiB)) as url,
            httpx.Client(base_url=url, timeout=60) as c,
        ):
            big = npy_bytes(np.concatenate([weight(0, 1024), weight(1, 1024)]))  # 8 MiB
            problem = assert_full(c.post("/v1/blobs", content=big), "blob store", "blobs/tmp")
            assert problem["needed_bytes"] == len(big) and problem["free_bytes"] < len(big)
            assert not leftovers(data_dir)

            # Streamed without a length: refused when the disk fills, the partial file removed.
            def chunks():
                for start in range(0, len(big), MiB):
                    yield big[start : start + MiB]

            streamed = c.post("/v1/blobs", content=chunks())
            problem = assert_full(streamed, "blob store", "blobs/tmp")
            assert problem["needed_bytes"] is None and "needed more room" in problem["detail"]
            assert not leftovers(data_dir)

            # The client's upload (streamed) raises the typed error, carrying the problem.
            with Client(url) as sdk, pytest.raises(InsufficientStorage) as raised:
                sdk.upload(np.concatenate([weight(3, 1024), weight(4, 1024)]))
            assert raised.value.status == 507 and raised.value.body["store"] == "blob store"
            assert not leftovers(data_dir)

            # A kernel request's multipart spool, likewise.
            spec = json.dumps({"in_channels": 1024, "out_channels": 2048, "spatial": 16})
            parts = c.post(
                "/v1/kernels/conv", files={"spec": (None, spec), "weight": ("w.npy", big)}
            )
            assert_full(parts, "blob store", "blobs/tmp")
            assert not leftovers(data_dir)

            # The service keeps serving.
            small = c.post("/v1/blobs", content=npy_bytes(weight(2, 64)))
            assert small.status_code == 201
            body = {
                "in_channels": 2,
                "out_channels": 2,
                "spatial": 4,
                "weights": {"weight": [[1, 0], [0, 1]]},
                "format": "mil",
            }
            assert c.post("/v1/kernels/conv", json=body).status_code == 200
            assert c.get("/readyz").status_code == 200
        no_500(data_dir, url)


def test_the_artifact_cache_gives_up_room_before_anything_is_refused(tmp_path):
    with small_filesystem(tmp_path / "data", "8m") as data_dir:
        with (
            uvicorn_server(data_dir, min_free_bytes="0") as url,
            httpx.Client(base_url=url, timeout=60) as c,
        ):
            built = []
            for seed in range(8):  # eight artifacts of about half a MiB each
                spec = json.dumps({**CONV, "format": "mil", "name": f"k{seed}"})
                answer = c.post(
                    "/v1/kernels/conv",
                    files={"spec": (None, spec), "weight": ("w.npy", npy_bytes(weight(seed)))},
                )
                assert answer.status_code == 200, answer.text
                built.append(answer)
            assert metric(c, "ane_cache_evictions_total") == 0
            # Each request's spool file is gone, and its space with it: no build worker keeps
            # the deleted file mapped once it is idle.
            eventually(lambda: unaccounted_bytes(data_dir) < 256 << 10, 10, "spool space freed")
            fill(data_dir / "ballast", leave=256 << 10)

            # An upload that fits only once cached artifacts are gone.
            upload = c.post("/v1/blobs", content=npy_bytes(weight(10)))
            assert upload.status_code == 201, upload.text
            evicted = metric(c, "ane_cache_evictions_total")
            assert evicted >= 1

            # A build with no room for its spool nor its zip: both made by eviction.
            spec = json.dumps({**CONV, "format": "mil", "name": "late"})
            late = c.post(
                "/v1/kernels/conv",
                files={"spec": (None, spec), "weight": ("w.npy", npy_bytes(weight(11)))},
            )
            assert late.status_code == 200, late.text
            assert late.headers["x-cache"] == "miss"
            assert metric(c, "ane_cache_evictions_total") > evicted
            assert not leftovers(data_dir)
        statuses = no_500(data_dir, url)
        assert 507 not in statuses
        api_log = log_path(data_dir, url).read_text()
        assert "evicted to make room" in api_log


def test_a_full_volume_refuses_builds_and_jobs_with_507_then_recovers(tmp_path):
    with (
        small_filesystem(tmp_path / "data", "6m") as data_dir,
        environ(
            PATH=f"{FAKE_XCRUN}{os.pathsep}{os.environ['PATH']}",
            FAKE_XCRUN_LOG=str(tmp_path / "xcrun.log"),
        ),
    ):
        settings = {
            "min_free_bytes": str(MiB),
            "job_max_tries": "2",
            "job_retry_backoff_s": "0.1",
            "sync_wait_s": "10",
        }
        with (
            uvicorn_server(data_dir, **settings) as url,
            httpx.Client(base_url=url, timeout=60) as c,
        ):
            digest = c.post("/v1/blobs", content=npy_bytes(weight(0))).json()["digest"]
            assert c.get("/readyz").status_code == 200
            ballast = fill(data_dir / "ballast", leave=64 << 10)

            ready = assert_problem(c.get("/readyz"), 503)
            assert "ANE_MIN_FREE_BYTES" in ready["checks"]["storage"]

            kernel = {**CONV, "weights": {"weight": digest}, "format": "mil"}
            problem = assert_full(
                c.post("/v1/kernels/conv", json=kernel), "artifact cache", "artifacts/tmp"
            )
            assert problem["needed_bytes"] >= 512 << 10  # the fp16 weights at least
            assert not leftovers(data_dir)

            job = c.post("/v1/jobs", json={"op": "conv", **kernel, "format": "mlmodelc"}).json()
            deadline = time.monotonic() + 60
            while (state := c.get(f"/v1/jobs/{job['id']}").json())["state"] not in (
                "succeeded",
                "failed",
            ) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert state["state"] == "failed" and state["error"]["kind"] == "storage", state
            assert "job scratch directory" in state["error"]["message"]
            assert state["attempts"] == 2
            sync = c.post("/v1/kernels/conv", json={**kernel, "format": "mlmodelc", "name": "s"})
            assert_problem(sync, 507)
            assert not leftovers(data_dir)

            ballast.unlink()  # room again: the same requests succeed
            assert c.get("/readyz").status_code == 200
            assert c.post("/v1/kernels/conv", json=kernel).status_code == 200
            again = c.post("/v1/kernels/conv", json={**kernel, "format": "mlmodelc", "name": "s"})
            assert again.status_code == 200, again.text
        no_500(data_dir, url)


def test_a_read_only_volume_is_named_with_503(tmp_path):
    with small_filesystem(tmp_path / "data", "6m") as data_dir:
        with (
            uvicorn_server(data_dir, min_free_bytes=str(MiB)) as url,
            httpx.Client(base_url=url, timeout=60) as c,
        ):
            body = {
                "in_channels": 2,
                "out_channels": 2,
                "spatial": 4,
                "weights": {"weight": [[1, 0], [0, 1]]},
                "format": "mil",
            }
            first = c.post("/v1/kernels/conv", json=body)
            assert first.status_code == 200
            remount(data_dir, "ro")
            try:
                refused = c.post("/v1/blobs", content=npy_bytes(weight(0, 8)))
                upload = assert_problem(refused, 503)
                assert upload["title"] == "Storage not writable" and upload["errno"] == "EROFS"
                assert upload["store"] == "blob store"
                assert upload["directory"].endswith("blobs/tmp")
                assert "read-only" in upload["detail"]
                assert "retry-after" not in refused.headers  # no retry helps: an operator must
                build = assert_problem(c.post("/v1/kernels/conv", json={**body, "name": "n"}), 503)
                assert build["store"] == "artifact cache"
                assert build["directory"].endswith("artifacts/tmp")
                ready = assert_problem(c.get("/readyz"), 503)
                assert "not writable" in ready["checks"]["storage"]
                hit = c.post("/v1/kernels/conv", json=body)  # what is stored is still served
                assert hit.status_code == 200 and hit.content == first.content
            finally:
                remount(data_dir, "rw")
            assert c.get("/readyz").status_code == 200
            assert c.post("/v1/kernels/conv", json={**body, "name": "n"}).status_code == 200
        no_500(data_dir, url)


def test_a_directory_the_service_may_not_write_is_named_with_503(tmp_path):
    """chattr +i: an immutable directory refuses new files with EPERM, even to root."""
    data_dir = tmp_path / "data"
    with (
        uvicorn_server(data_dir, min_free_bytes="0") as url,
        httpx.Client(base_url=url, timeout=60) as c,
    ):
        spool = data_dir / "blobs" / "tmp"
        done = subprocess.run(["chattr", "+i", str(spool)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not available here: {done.stderr.strip()}")
        try:
            problem = assert_problem(c.post("/v1/blobs", content=npy_bytes(weight(0, 8))), 503)
            assert problem["errno"] in ("EPERM", "EACCES") and problem["store"] == "blob store"
            assert problem["directory"] == str(spool)
            assert str(spool) in problem["detail"]
            assert "not writable" in assert_problem(c.get("/readyz"), 503)["checks"]["storage"]
        finally:
            subprocess.run(["chattr", "-i", str(spool)], check=True)
        assert c.post("/v1/blobs", content=npy_bytes(weight(0, 8))).status_code == 201
    no_500(data_dir, url)
