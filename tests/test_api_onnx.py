"""POST /v1/onnx on a live server: a model with external data uploaded as blobs by digest (the
client's compile_onnx), a small one as multipart parts, a compiled format as a job; hostile files
each a 4xx problem+json naming the file, node or tensor, nothing half-written, the server alive."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import httpx
import onnx
import pytest
from conftest import hide_packages, uvicorn_server
from hostile_support import hostile_server
from http_support import assert_problem
from onnx_hostile import HOSTILE
from onnx_support import Case, model_of, op, rng_array
from test_passes_onnx import BEFORE_PASSES

from app.client import Client
from app.core.digest import file_digest

FIXTURES = __import__("pathlib").Path(__file__).resolve().parent / "fixtures" / "onnx"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with hostile_server(tmp_path_factory.mktemp("onnx-api") / "data") as server:
        yield server


def _mlp(folder, external: bool):
    """x·W1 → GELU → ·W2 + b, its weights as external data or embedded."""
    case = Case(
        "mlp",
        [
            op("MatMul", ["x", "w1"], ["h"]),
            op("Gelu", ["h"], ["g"]),
            op("MatMul", ["g", "w2"], ["m"]),
            op("Add", ["m", "b"], ["y"]),
        ],
        {"x": [1, "tokens", 32]},
        consts={
            "w1": rng_array([32, 64], 1, 0.2),
            "w2": rng_array([64, 32], 2, 0.2),
            "b": rng_array([32], 3),
        },
        opset=20,
    )
    path = folder / "mlp.onnx"
    onnx.save(
        model_of(case),
        path,
        save_as_external_data=external,
        location="mlp.onnx.data",
        size_threshold=0,
    )
    return path


def _zip(content: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(content))


def test_a_model_with_external_data_by_digest_through_the_client(live, tmp_path):
    path = _mlp(tmp_path, external=True)
    with Client(live.url) as c:
        content = c.compile_onnx(path, shapes={"x": [1, 16, 32]}, verify=True, format="mil")
    z = _zip(content)
    report = json.loads(z.read("verification.json"))
    assert report["passed"], report["outputs"]
    assert report["outputs"]["y"]["tolerance"] > 0
    kernel = json.loads(z.read("kernel.json"))
    assert kernel["onnx"]["inputs"] == {"x": "x"} and kernel["op"] == "onnx"
    assert kernel["inputs"][0]["shape"] == [1, 16, 32]
    # the same request again is the cached artifact
    with Client(live.url) as c:
        assert c.compile_onnx(path, shapes={"x": [1, 16, 32]}, verify=True, format="mil") == content


def test_a_small_model_as_multipart_parts(live, tmp_path):
    path = _mlp(tmp_path, external=False)
    spec = {"shapes": {"x": [1, 8, 32]}, "format": "mlpackage", "name": "mlp"}
    answer = live.client.post(
        "/v1/onnx",
        files={"spec": (None, json.dumps(spec)), "mlp.onnx": ("mlp.onnx", path.read_bytes())},
    )
    assert answer.status_code == 200, answer.text
    assert "mlp.mlpackage/Manifest.json" in _zip(answer.content).namelist()
    # the part's digest is the file's, hashed as it arrived: the same model named by that digest
    # is the same request, answered from the cache
    with Client(live.url) as c:
        c.upload_file(path)
    body = {**spec, "files": {"mlp.onnx": file_digest(path)}, "model": "mlp.onnx"}
    again = live.client.post("/v1/onnx", json=body)
    assert again.status_code == 200, again.text
    assert again.headers["X-Cache"] == "hit" and again.content == answer.content


def test_a_compiled_format_runs_as_a_job(live, tmp_path):
    path = _mlp(tmp_path, external=True)
    with Client(live.url) as c:
        content = c.compile_onnx(path, shapes={"x": [1, 8, 32]}, format="mlmodelc")
    assert any(n.endswith("model.mil") for n in _zip(content).namelist())


def test_unknown_blobs_and_bad_options_are_named(live):
    missing = "sha256:" + "ab" * 32
    answer = live.client.post("/v1/onnx", json={"files": {"m.onnx": missing}})
    assert_problem(answer, 404, "files.m.onnx")
    answer = live.client.post("/v1/onnx", json={"files": {"m.onnx": missing}, "io_dtype": "fp8"})
    assert_problem(answer, 422, "io_dtype")


@pytest.mark.parametrize("name", [n for n in HOSTILE if n != "location_through_a_link"])
def test_hostile_files_over_http(live, tmp_path, name):
    folder = tmp_path / "model"
    folder.mkdir()
    model, fragment, field = HOSTILE[name](folder)
    files = {"spec": (None, json.dumps({"model": model, "verify": True}))}
    for path in sorted(folder.iterdir()):
        files[path.name] = (path.name, path.read_bytes())
    with live.leaves_nothing():
        answer = live.client.post("/v1/onnx", files=files)
    problem = assert_problem(answer, answer.status_code, field)
    assert 400 <= answer.status_code < 500, answer.text
    assert fragment in problem["detail"], problem
    live.alive()


@pytest.mark.slow
def test_an_import_takes_passes_over_http_and_through_the_client(live):
    vit = FIXTURES / "vit.onnx"
    with Client(live.url) as c:
        plain = c.compile_onnx(vit, format="mil", name="golden", passes="none")
        fused = c.compile_onnx(vit, format="mil", name="golden", verify=True)
    assert hashlib.sha256(plain).hexdigest() == BEFORE_PASSES["vit", "mil"][1]
    report = json.loads(_zip(fused).read("kernel.json"))["passes"]
    assert report["pipeline"] == "default" and report["ops_after"] < report["ops_before"]
    assert json.loads(_zip(fused).read("verification.json"))["passed"]
    body = {"files": {"vit.onnx": file_digest(vit)}, "format": "mil", "name": "golden"}
    assert_problem(
        live.client.post("/v1/onnx", json={**body, "passes": ["nope"]}), 422, "passes[0]"
    )
    spec = {"format": "mil", "name": "golden", "passes": "none"}
    answer = live.client.post(
        "/v1/onnx",
        files={"spec": (None, json.dumps(spec)), "vit.onnx": ("vit.onnx", vit.read_bytes())},
    )
    assert answer.status_code == 200, answer.text
    assert hashlib.sha256(answer.content).hexdigest() == BEFORE_PASSES["vit", "mil"][1]


@pytest.mark.slow  # a farm build in a subprocess
def test_a_farm_manifest_onnx_entry_builds_the_clis_bytes_and_reruns_up_to_date(live, tmp_path):
    import shutil
    import subprocess
    import sys

    from app.cli import main

    shutil.copy(FIXTURES / "vit.onnx", tmp_path / "vit.onnx")
    manifest = tmp_path / "farm.toml"
    manifest.write_text(
        '[kernels.vit]\nonnx = "vit.onnx"\nformat = "mil"\n'
        '[kernels.golden]\nonnx = "vit.onnx"\nformat = "mil"\npasses = "none"\n'
    )
    args = [
        sys.executable,
        "-m",
        "app.cli",
        "build",
        str(manifest),
        "--server",
        live.url,
        "--out",
        str(tmp_path / "out"),
    ]
    first = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr + first.stdout
    lock = json.loads((tmp_path / "ane-kernels.lock").read_text())["kernels"]["vit"]
    assert lock["file"] == "vit.mil.zip" and list(lock["onnx"]) == ["vit.onnx"]
    local = tmp_path / "local.zip"
    assert (
        main(
            [
                "onnx",
                str(tmp_path / "vit.onnx"),
                "--format",
                "mil",
                "--name",
                "vit",
                "-o",
                str(local),
            ]
        )
        == 0
    )
    assert (tmp_path / "out" / "vit.mil.zip").read_bytes() == local.read_bytes()
    # an entry's passes reach the service: "none" builds the import as written
    as_written = (tmp_path / "out" / "golden.mil.zip").read_bytes()
    assert hashlib.sha256(as_written).hexdigest() == BEFORE_PASSES["vit", "mil"][1]
    again = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout


def test_the_cli_builds_on_a_server_with_the_same_summary(live, tmp_path, capsys):
    from app.cli import main

    out = tmp_path / "vit.zip"
    code = main(
        [
            "onnx",
            str(FIXTURES / "vit.onnx"),
            "--server",
            live.url,
            "--verify",
            "--json",
            "-o",
            str(out),
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["server"] == live.url
    assert summary["verification"]["passed"] and summary["preflight_counts"]["error"] == 0


@pytest.mark.slow
def test_without_the_onnx_extra_the_service_serves_the_rest_and_answers_503(tmp_path, monkeypatch):
    """onnx and onnxruntime are an extra: a service installed without them starts, builds
    kernels, and refuses an ONNX import naming what to install."""
    hide_packages(monkeypatch, onnx="onnx", onnxruntime="onnxruntime")
    path = _mlp(tmp_path, external=False)
    with uvicorn_server(tmp_path / "data") as base, httpx.Client(base_url=base, timeout=60) as c:
        kernel = c.post(
            "/v1/kernels",
            json={"op": "identity", "channels": 8, "spatial": 4, "format": "mil"},
        )
        assert kernel.status_code == 200, kernel.text
        spec = {"shapes": {"x": [1, 8, 32]}, "format": "mil"}
        answer = c.post(
            "/v1/onnx",
            files={"spec": (None, json.dumps(spec)), "mlp.onnx": ("mlp.onnx", path.read_bytes())},
        )
        problem = assert_problem(answer, 503, "onnx")
        assert "ane-kernel-service[onnx]" in problem["detail"], problem
    left = [p for p in (tmp_path / "data" / "work").rglob("*") if p.is_file()]
    assert not left, f"nothing half-written: {left}"
