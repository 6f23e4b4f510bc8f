"""POST /v1/models on a live service with the embedded job engine: a checkpoint folder uploaded
by Client.compile_model in resumable parts, the kit built as a job with a stage per program,
and the kit equal byte for byte to `ane-kernels model`'s; a second kit of the same checkpoint
uploads nothing; bad requests refused by name."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator

import httpx
import pytest
from conftest import uvicorn_server
from kit_support import KIT_QWEN3, write_model

from app.cli import main
from app.client import Client

FLAGS = {"format": "mil", "context": 16, "prefill": 4, "kv": "state"}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("models") / "data"
    with uvicorn_server(data_dir, upload_part_bytes=str(64 << 10)) as url:
        yield url
    shutil.rmtree(data_dir, ignore_errors=True)


def test_the_clients_kit_is_the_clis_byte_for_byte(base, tmp_path):
    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=2)
    cli = tmp_path / "cli.kit.zip"
    args = [f"--{k}={v}" for k, v in FLAGS.items()]
    assert main(["model", str(folder), "-o", str(cli), *args]) == 0
    sent: dict[str, int] = {}
    with Client(base, poll_interval=0.1) as client:
        kit = client.compile_model(folder, progress=lambda name, n, size: sent.update({name: n}),
                                   **FLAGS)  # fmt: skip
        assert kit == cli.read_bytes()
        sizes = {p.name: p.stat().st_size for p in folder.iterdir()
                 if p.suffix in (".json", ".safetensors")}  # fmt: skip
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


def test_the_documented_client_call_runs(base, tmp_path, monkeypatch):
    """docs/kits.md's `POST /v1/models` example, as written, in a folder holding the model."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "kits.md").read_text()
    section = doc[doc.index("## Over HTTP") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    write_model(tmp_path / "Qwen3-0.6B", KIT_QWEN3, seed=5)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/kits.md", "exec"), {"SERVER": base})
    cli = tmp_path / "cli.kit.zip"
    assert main(["model", "Qwen3-0.6B", "-o", str(cli), "--format", "mil", "--context", "16",
                 "--prefill", "4"]) == 0  # fmt: skip
    assert (tmp_path / "qwen3.kit.zip").read_bytes() == cli.read_bytes()
