"""POST /v1/models on a live service with the embedded job engine: a checkpoint folder uploaded
by Client.compile_model in resumable parts, the kit built as a job with a stage per program,
and the kit equal byte for byte to `ane-kernels model`'s; a second kit of the same checkpoint
uploads nothing; bad requests refused by name."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator

import httpx
import pytest
from conftest import uvicorn_server
from kit_support import KIT_QWEN3, write_model

from app.cli import main
from app.client import Client

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

FLAGS = {"format": "mil", "context": 16, "prefill": 4, "kv": "state"}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("models") / "data"
    # device checks run with the labelled stand-in for Core ML (the reference executor)
    with uvicorn_server(
        data_dir, upload_part_bytes=str(64 << 10), device_check_runtime="stand-in"
    ) as url:
        yield url
    shutil.rmtree(data_dir, ignore_errors=True)


def test_the_clients_kit_is_the_clis_byte_for_byte(base, tmp_path):
    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=2)
    cli = tmp_path / "cli.kit.zip"
    args = [f"--{k}={v}" for k, v in FLAGS.items()]
    assert main(["model", str(folder), "-o", str(cli), *args]) == 0
    sent: dict[str, int] = {}
    with Client(base, poll_interval=0.1) as client:
        kit = client.compile_model(
            folder, progress=lambda name, n, size: sent.update({name: n}), **FLAGS
        )
        assert kit == cli.read_bytes()
        sizes = {
            p.name: p.stat().st_size
            for p in folder.iterdir()
            if p.suffix in (".json", ".safetensors")
        }
        assert sent == sizes  # every file, all of it; the safetensors in several parts
        job = next(j for j in client.jobs()["jobs"] if j["request"].get("kind") == "model")
        assert {"queued", "generating", "decoder_0", "head_0", "succeeded"} <= set(job["stages"])
        assert job["request"]["options"] == FLAGS
        sent.clear()
        again = client.compile_model(folder, progress=lambda *a: sent.update({a[0]: a[1]}), **FLAGS)
        assert again == kit and sent == {}  # nothing uploaded twice, the same job's kit


def test_bad_model_requests_are_refused_by_name(base, tmp_path):
    missing = "sha256:" + hashlib.sha256(b"not uploaded").hexdigest()
    with httpx.Client(base_url=base, timeout=60) as http:
        unknown = http.post("/v1/models", json={"files": {"config.json": missing}})
        assert unknown.status_code == 404 and unknown.json()["field"] == "files.config.json"
        device = http.post("/v1/models", json={"files": {"config.json": missing}, "device": "m99"})
        assert device.status_code == 422 and device.json()["field"] == "device"
        assert "m4" in device.json()["detail"]
        folder = http.post("/v1/models", json={"files": {"../config.json": missing}})
        assert folder.status_code == 422 and folder.json()["field"] == "files.../config.json"
        empty = http.post("/v1/models", json={"files": {}})
        assert empty.status_code == 422 and empty.json()["field"] == "files"
        # quantize auto and the quality gate's thresholds: checked before anything is read
        for body, field in [
            ({"quantize": "auto"}, "max_kl"),
            ({"quantize": "auto", "max_kl": -1}, "body.max_kl"),
            ({"quantize": "auto", "min_top1": 1.5}, "body.min_top1"),
            ({"quantize": "auto", "max_kl": "x"}, "body.max_kl"),
            ({"quantize": "fast", "max_kl": 0.1}, "quantize"),
            ({"max_kl": 0.1}, "max_kl"),
        ]:
            bad = http.post("/v1/models", json={"files": {"config.json": missing}, **body})
            assert bad.status_code == 422 and bad.json()["field"] == field, (body, bad.json())


def test_a_device_check_job_reports_the_kit_on_the_stand_in(base, tmp_path):
    """POST /v1/device-checks on a kit job: a job for the macOS queue whose report (here the
    labelled stand-in's) names each program's load times and placement, the decode time, and
    the tokens against the reference."""
    from app.client.flows import checkpoint_files
    from app.core.digest import file_digest
    from app.kits.device_check import STAND_IN
    from app.kits.job import ModelRequest

    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=6)
    with Client(base, poll_interval=0.1) as client:
        client.compile_model(folder, format="mlpackage", context=16, prefill=4)
    files = {name: file_digest(path) for name, path in checkpoint_files(folder).items()}
    # the job's id, as the service derives it (a default option counts as left out)
    kit_job = {
        "id": ModelRequest.create(files, {"format": "mlpackage", "context": 16, "prefill": 4}).key
    }
    with httpx.Client(base_url=base, timeout=60) as http:
        answer = http.post(
            "/v1/device-checks", json={"kit": kit_job["id"], "device": "m4", "max_new_tokens": 3}
        )
        assert answer.status_code == 202, answer.text
        assert answer.json()["queue"] == "ane-macos"
        with Client(base, poll_interval=0.1) as client:
            job = client.job(answer.json()["id"]).wait(timeout=120).data
        assert job["state"] == "succeeded", job.get("error")
        report = job["device_check"]
        assert report["runtime"] == STAND_IN and report["stand_in"] and report["device"] == "m4"
        assert [p["name"] for p in report["programs"]] == ["decoder_0", "head_0"]
        assert report["tokens_match"] and report["passed"] and len(report["tokens"]) == 3
        assert report["calibration_row"]["measured"] is False
        unknown = http.post("/v1/device-checks", json={"kit": "0" * 64, "device": "m4"})
        assert unknown.status_code == 404 and unknown.json()["field"] == "kit"
        device = http.post("/v1/device-checks", json={"kit": kit_job["id"], "device": "m99"})
        assert device.status_code == 422 and device.json()["field"] == "device"


def test_without_the_stand_in_a_device_check_needs_a_macos_worker(tmp_path):
    data_dir = tmp_path / "data"
    with uvicorn_server(data_dir) as url, httpx.Client(base_url=url, timeout=60) as http:
        answer = http.post("/v1/device-checks", json={"kit": "0" * 64, "device": "m4"})
    assert answer.status_code in (404, 503)  # no kit here; on Linux, Core ML is checked first


def test_a_bad_checkpoint_is_refused_up_front_naming_its_files_not_a_server_path(base, tmp_path):
    """A config without num_hidden_layers and a folder without weights: 422 at submission, each
    naming the file as the request named it."""
    from kit_support import KIT_LLAMA

    bad_config, good_config = tmp_path / "bad" / "config.json", tmp_path / "good" / "config.json"
    for path, config in (
        (bad_config, {k: v for k, v in KIT_LLAMA.items() if k != "num_hidden_layers"}),
        (good_config, KIT_LLAMA),
    ):
        path.parent.mkdir()
        path.write_text(json.dumps(config))
    with Client(base) as client:
        bad_digest = client.upload_file(bad_config)["digest"]
        good_digest = client.upload_file(good_config)["digest"]
    with httpx.Client(base_url=base, timeout=60) as http:
        bad = http.post("/v1/models", json={"files": {"config.json": bad_digest}})
        assert bad.status_code == 422 and bad.json()["field"] == "config.num_hidden_layers"
        assert bad.json()["detail"].startswith("config.json: "), bad.json()
        no_weights = http.post("/v1/models", json={"files": {"config.json": good_digest}})
        assert no_weights.status_code == 422 and no_weights.json()["field"] == "checkpoint"
        assert no_weights.json()["detail"].startswith("the checkpoint holds neither")
        for answer in (bad, no_weights):
            assert "/tmp" not in answer.text and "ane-kit-limits" not in answer.text
