"""A model kit's limits on a live service (embedded job engine, real uvicorn): a checkpoint or a
kit over its cap refused up front by name with nothing queued; a job that runs past its own
time limit failed, naming the settings, with nothing left behind; a kit larger than the
kernels' cache budget built and kept (its own pool, ANE_KIT_CACHE_MAX_BYTES); the limits in the
job and in /v1/info."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import uvicorn_server
from kit_support import KIT_LLAMA, KIT_QWEN3, write_model

from app.client import Client
from app.client.flows import checkpoint_files
from app.kits.build import KitOptions
from app.kits.causal_lm import open_model
from app.kits.limits import limits_of
from app.settings import Settings

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

OPTIONS = {"format": "mil", "context": 16, "prefill": 4}
TIGHT = {
    "max_checkpoint_bytes": "1000000",
    "kit_cache_max_bytes": "90000",
    "kit_timeout_base_s": "0.001",
    "kit_timeout_s_per_gb": "0",
}


@pytest.fixture(scope="module")
def tight(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    data_dir = tmp_path_factory.mktemp("tight") / "data"
    with uvicorn_server(data_dir, **TIGHT) as url:
        yield url, data_dir
    shutil.rmtree(data_dir, ignore_errors=True)


def _uploaded(base: str, folder: Path) -> dict[str, str]:
    with Client(base) as client:
        return {
            name: client.upload_file(path)["digest"]
            for name, path in checkpoint_files(folder).items()
        }


def test_a_kit_over_a_cap_is_refused_up_front_naming_the_setting(tight, tmp_path):
    base, _ = tight
    llama = write_model(tmp_path / "llama", KIT_LLAMA, seed=1)  # 2.2 MB of float32 tensors
    wide = write_model(tmp_path / "wide", KIT_QWEN3 | {"vocab_size": 600}, seed=1)
    with httpx.Client(base_url=base, timeout=60) as http:
        checkpoint = http.post("/v1/models", json={"files": _uploaded(base, llama), **OPTIONS})
        assert checkpoint.status_code == 413, checkpoint.text
        problem = checkpoint.json()
        assert checkpoint.headers["content-type"].startswith("application/problem+json")
        assert problem["field"] == "files" and problem["setting"] == "ANE_MAX_CHECKPOINT_BYTES"
        assert "ANE_MAX_CHECKPOINT_BYTES=1000000" in problem["detail"]
        assert problem["checkpoint_bytes"] > 1_000_000
        kit = http.post("/v1/models", json={"files": _uploaded(base, wide), **OPTIONS})
        assert kit.status_code == 413, kit.text
        problem = kit.json()
        assert problem["field"] == "files" and problem["setting"] == "ANE_KIT_CACHE_MAX_BYTES"
        assert "ANE_KIT_CACHE_MAX_BYTES=90000" in problem["detail"]
        assert problem["kit_bytes_estimate"] > 90_000
        assert http.get("/v1/jobs").json()["jobs"] == []  # nothing queued


def test_a_job_past_its_own_time_limit_fails_naming_it(tight, tmp_path):
    base, data_dir = tight
    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=2)
    with httpx.Client(base_url=base, timeout=60) as http:
        # verified, the build takes hundreds of times its 1 ms limit
        answer = http.post(
            "/v1/models", json={"files": _uploaded(base, folder), **OPTIONS, "verify": True}
        )
        assert answer.status_code == 202, answer.text
        assert answer.json()["limits"]["timeout_s"] == 0.001
    with Client(base, poll_interval=0.1) as client:
        job = client.job(answer.json()["id"]).wait(timeout=60).data
    assert job["state"] == "failed" and job["error"]["kind"] == "timeout"
    assert "time limit of 0.001s" in job["error"]["message"]
    assert "ANE_KIT_TIMEOUT_BASE_S + ANE_KIT_TIMEOUT_S_PER_GB" in job["error"]["message"]
    # the build it stopped ran on in the build pool; the zip it wrote did not stay
    tmp_dir = data_dir / "artifacts" / "tmp"
    deadline = time.monotonic() + 30
    while any(tmp_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_dir.iterdir()) == []
    assert not list((data_dir / "artifacts").glob("??/*.zip"))


@pytest.mark.slow
def test_a_kit_larger_than_the_kernel_cache_is_built_and_kept(tmp_path):
    """ANE_CACHE_MAX_BYTES of 4 KiB, a kit of ~100 KB: kits have their own room in the cache."""
    data_dir = tmp_path / "data"
    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=3)
    settings = Settings(cache_max_bytes=4096)
    expected = limits_of(open_model(folder), KitOptions(**OPTIONS), settings)
    kernel = {"op": "identity", "channels": 4, "spatial": 1, "format": "mil"}
    with uvicorn_server(data_dir, cache_max_bytes="4096") as base:
        with httpx.Client(base_url=base, timeout=60) as http:
            built = http.post("/v1/kernels", json=kernel)
            assert built.status_code == 200 and built.headers["x-cache"] == "miss", built.text
        with Client(base, poll_interval=0.1) as client:
            kit = client.compile_model(folder, **OPTIONS)
            assert len(kit) > 4096
            job = next(j for j in client.jobs()["jobs"] if j["request"]["kind"] == "model")
            assert job["state"] == "succeeded"
            assert job["limits"] == expected.model_dump()
            assert expected.timeout_s > settings.kit_timeout_base_s
            limits = client.info()["limits"]
        with httpx.Client(base_url=base, timeout=60) as http:
            again = http.get(f"/v1/jobs/{job['id']}/artifact")
            assert again.status_code == 200 and again.content == kit  # still in the cache
            # nor did the kit, 25 times the kernels' budget, evict the kernel built before it
            assert http.post("/v1/kernels", json=kernel).headers["x-cache"] == "hit"
    assert limits["cache_max_bytes"] == 4096
    assert limits["kit_cache_max_bytes"] == settings.kit_cache_max_bytes
    assert limits["max_checkpoint_bytes"] == settings.max_checkpoint_bytes
    assert limits["kit_timeout_base_s"] == settings.kit_timeout_base_s
    assert limits["kit_timeout_s_per_gb"] == settings.kit_timeout_s_per_gb
    assert limits["job_timeout_s"] == settings.job_timeout_s
    assert limits["max_verify_bytes"] == settings.max_verify_bytes
