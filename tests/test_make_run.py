"""The service as `make run` starts it, not as the other tests set it up: `make run` itself in a
copy of the checkout, every ANE_* setting unset, so the data dir is the relative `data`.

The README's and the docs' HTTP flows (a kernel, a graph, an upload in parts, Client.compile_model
with save_to=, the curl kit script, jobs) run against this same kind of server in
tests/test_docs_examples.py. Here: what `make run` prints, and a kit job at a size where size
changes the code path (a decoder whose model.mil passes 1 MiB, in an .mlmodelc kit, verified),
each leaving nothing in the data dir's scratch folders.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import MadeRun, checkout_copy, make_run_server
from kit_support import KIT_QWEN3, write_model

from app.client import Client
from app.settings import Settings

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

LAYERS = 20  # model.mil past kitzip.MAPPED_BYTES (1 MiB): see tests/test_kits_real_size.py


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Iterator[MadeRun]:
    clone = checkout_copy(tmp_path_factory.mktemp("clone") / "ane-kernel-service")
    with make_run_server(clone) as run:
        yield run


def _scratch(made: MadeRun) -> list[Path]:
    """Files in the data dir's scratch folders: a job's work folder, the cache's temp files."""
    folders = (made.data_dir / "work", made.data_dir / "artifacts" / "tmp")
    return [p for folder in folders if folder.is_dir() for p in folder.rglob("*") if p.is_file()]


def test_make_run_says_where_the_docs_are(made):
    port = made.url.rsplit(":", 1)[1]
    first = made.log.read_text(encoding="utf-8").splitlines()[0]
    assert f"http://127.0.0.1:{port}/docs" in first
    assert httpx.get(f"{made.url}/docs").status_code == 200


def test_the_data_dir_is_absolute_from_the_start(tmp_path, monkeypatch):
    """Relative (the default `data`, or ANE_DATA_DIR=rel) is made absolute when the settings are
    read, against the folder the process started in: the API, the workers and the CLI read it
    from here."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANE_DATA_DIR", raising=False)
    assert Settings().data_dir == tmp_path / "data"
    monkeypatch.setenv("ANE_DATA_DIR", "elsewhere/data")
    assert Settings().data_dir == tmp_path / "elsewhere" / "data"


@pytest.mark.slow
def test_a_kit_past_1_mib_of_program_text_builds_verified_under_make_run(made, tmp_path):
    """Client.compile_model with save_to=, as docs/kits.md shows it: the checkpoint's files are
    linked from the (relative) data dir into the job's scratch folder, and the .mlmodelc kit's
    decoder (model.mil 1.19 MB, stored) is read back mapped by the verification."""
    folder = write_model(tmp_path / "qwen3-20", KIT_QWEN3 | {"num_hidden_layers": LAYERS}, seed=2)
    out = tmp_path / "out"
    out.mkdir()
    saved = out / "kit.zip"
    with Client(made.url, poll_interval=0.2) as client:
        client.compile_model(
            folder, save_to=saved, format="mlmodelc", context=16, prefill=4, verify=True
        )
    with zipfile.ZipFile(saved) as zf:
        assert json.loads(zf.read("verification.json"))["passed"]
        assert zf.getinfo("decoder_0.mlmodelc/model.mil").file_size >= 1 << 20
    assert list(out.iterdir()) == [saved]
    assert made.data_dir.is_dir() and (made.data_dir / "blobs").is_dir()
    assert _scratch(made) == []


def test_a_kit_request_without_config_json_names_files(made, tmp_path):
    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=3)
    with Client(made.url) as client:
        digest = client.upload_file(folder / "model.safetensors")["digest"]
    answer = httpx.post(f"{made.url}/v1/models", json={"files": {"model.safetensors": digest}})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["field"] == "files"
    assert problem["detail"].startswith("config.json is missing from it"), problem
    assert _scratch(made) == []
