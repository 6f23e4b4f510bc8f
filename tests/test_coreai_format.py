"""`format: "aimodel"` end to end: the Python API, the CLI and HTTP through the one artifact
builder; the same bytes from two processes; verification by Apple's runtime beside the
reference executor; a runtime that aborts at exit or fails; and a service without coreai-core."""

import hashlib
import io
import json
import shlex
import subprocess
import sys
import zipfile

import httpx
import numpy as np
import pytest
from conftest import REPO, hide_packages, uvicorn_server
from http_support import assert_problem

pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")

from app.artifacts import kernel_zip, prepare
from app.catalog_build import build_kernel
from app.cli import main as cli_main
from app.coreai import AppleRuntimeError, Call, run_aimodel
from app.coreai.package import aimodel_of
from app.errors import ErrorKind, FieldError, RequestError
from app.graphs.examples import swiglu_ffn
from app.kernels import CATALOG
from app.reference.apple import with_apple_runtime
from app.reference.validation import InvalidArtifact, validate
from app.request import KernelRequest

CONV = {"in_channels": 32, "out_channels": 16, "spatial": 4}
INT4 = {"mode": "linear", "dtype": "int4", "granularity": "per_block", "block_size": 8}


def _zip(data: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(data))


def test_the_zip_holds_the_asset_and_kernel_json_says_what_is_unconfirmed():
    data = kernel_zip("conv", CONV, format="aimodel", random_seed=0, quantize=INT4)
    with _zip(data) as zf:
        names = set(zf.namelist())
        assert names == {
            "kernel.json",
            "conv.aimodel/main.mlirb",
            "conv.aimodel/main.hash",
            "conv.aimodel/metadata.json",
        }
        mlirb = zf.read("conv.aimodel/main.mlirb")
        assert mlirb.startswith(b"ML\xefR")
        assert zf.read("conv.aimodel/main.hash") == hashlib.sha256(mlirb).digest()
        assert "creationDate" not in json.loads(zf.read("conv.aimodel/metadata.json"))
        kernel = json.loads(zf.read("kernel.json"))
    assert kernel["format"] == "aimodel"
    coreai = kernel["coreai"]
    assert coreai["version"] == "1.0.0b3" and coreai["graphs"] == ["main"]
    assert coreai["subbyte_weights"] == ["weight_data"]
    assert "not yet confirmed on a device" in coreai["subbyte_packing"]


BUILD_IN_A_PROCESS = """
import hashlib, sys
from app.artifacts import kernel_zip
zips = [kernel_zip("conv", {"in_channels": 32, "out_channels": 16, "spatial": 4},
                   format="aimodel", random_seed=0, quantize=QUANTIZE),
        kernel_zip("decoder_layer", {"hidden_size": 32, "intermediate_size": 48,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "seq_len": 4},
                   format="aimodel", random_seed=0,
                   functions={"prefill": {}, "decode": {"seq_len": 1, "mode": "decode",
                                                         "cache_len": 8}})]
print(" ".join(hashlib.sha256(z).hexdigest() for z in zips))
""".replace("QUANTIZE", repr(INT4))


@pytest.mark.slow
def test_two_processes_write_byte_identical_zips():
    digests = [
        subprocess.run(
            [sys.executable, "-c", BUILD_IN_A_PROCESS],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        for _ in range(2)
    ]
    assert len(digests[0]) == 2 and digests[0] == digests[1]


def test_the_cache_key_holds_the_coreai_core_version(monkeypatch):
    before = KernelRequest.create("conv", CONV, format="aimodel").key
    assert KernelRequest.create("conv", CONV, format="mlpackage").key != before
    monkeypatch.setattr("app.request.coreai_version", lambda: "1.0.0b4")
    assert KernelRequest.create("conv", CONV, format="aimodel").key != before


def test_verify_reports_both_executors_and_their_agreement():
    decode = CATALOG["attention"].examples[4]  # writes its KV cache: outputs and states
    data = kernel_zip("attention", decode, format="aimodel", random_seed=0, verify=True)
    with _zip(data) as zf:
        report = json.loads(zf.read("verification.json"))
    apple = report["apple_runtime"]
    assert apple["runtime"].startswith("coreai-core 1.0.0b3")
    assert set(apple["functions"]["main"]["outputs"]) == set(report["outputs"])
    agreement = report["agreement"]["outputs"]
    assert set(agreement) == set(report["outputs"]) | set(report["states"])
    assert all(a["both_passed"] for a in agreement.values())
    assert report["passed"] and apple["passed"] and report["agreement"]["both_passed"]


def test_an_op_core_ai_cannot_express_is_refused_naming_it_before_anything_is_written(tmp_path):
    request = KernelRequest.create(
        "conv", CONV, format="aimodel", quantize={"mode": "prune", "target_sparsity": 0.5}
    )
    with pytest.raises(RequestError) as caught:
        prepare(request, random_seed=0)
    assert caught.value.field == "params"
    assert "constexpr_sparse_to_dense" in caught.value.message
    assert caught.value.extra["node"] == "weight"
    out = tmp_path / "refused.zip"
    code = cli_main(
        [
            "compile",
            "conv",
            "--params",
            json.dumps(CONV),
            "--random-weights",
            "0",
            "--format",
            "aimodel",
            "--quantize",
            '{"mode": "palettize", "nbits": 3}',
            "-o",
            str(out),
        ]
    )
    assert code == 2 and not out.exists()


def test_the_cli_writes_a_verified_aimodel_zip(tmp_path, capsys):
    out = tmp_path / "conv.aimodel.zip"
    code = cli_main(
        [
            "compile",
            "conv",
            "--params",
            json.dumps(CONV),
            "--random-weights",
            "0",
            "--format",
            "aimodel",
            "--verify",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    with zipfile.ZipFile(out) as zf:
        assert json.loads(zf.read("verification.json"))["apple_runtime"]["passed"]


def test_an_exit_time_abort_of_the_runtime_child_is_survived(monkeypatch):
    build = build_kernel("conv", {"in_channels": 4, "out_channels": 8, "spatial": 2}, random_seed=0)
    x = np.ones((1, 4, 1, 2), np.float16)
    monkeypatch.setenv("ANE_COREAI_ABORT_AFTER_RESULTS", "1")
    report = run_aimodel(aimodel_of(build), [Call("main", {"x": x})])
    assert report.exit_status != 0  # the child died by SIGABRT, after its results
    exact = x[0, :, 0, :].astype(np.float64).T @ build.weights["weight"].astype(np.float64).T
    got = report.results[0].outputs["y"][0, :, 0, :].T
    assert np.abs(got - exact).max() < 1e-2


def test_a_runtime_failure_is_an_error_with_the_runtimes_message():
    build = build_kernel("conv", {"in_channels": 4, "out_channels": 8, "spatial": 2}, random_seed=0)
    files = aimodel_of(build)
    with pytest.raises(AppleRuntimeError) as caught:  # an input the function does not have
        run_aimodel(files, [Call("main", {"nope": np.ones((1, 4, 1, 2), np.float16)})])
    assert caught.value.message and "exit status 1" in caught.value.message


WEIGHTS = {"weight": (0.1 * np.ones((16, 32))).tolist()}


def test_the_service_serves_aimodel_over_http(client):
    body = {"op": "conv", **CONV, "format": "aimodel", "verify": True, "weights": WEIGHTS}
    response = client.post("/v1/kernels", json=body)
    assert response.status_code == 200, response.text
    assert 'filename="conv.aimodel.zip"' in response.headers["content-disposition"]
    with _zip(response.content) as zf:
        assert "conv.aimodel/main.mlirb" in zf.namelist()
        assert json.loads(zf.read("verification.json"))["apple_runtime"]["passed"]


@pytest.mark.slow
def test_without_coreai_core_the_service_starts_serves_other_formats_and_answers_503(
    tmp_path, monkeypatch
):
    hide_packages(monkeypatch, coreai="coreai-core")
    with uvicorn_server(tmp_path / "data") as base, httpx.Client(base_url=base, timeout=60) as c:
        body = {"op": "conv", **CONV, "weights": WEIGHTS}
        assert c.get("/v1/info").json()["formats"] == ["mlpackage", "mil", "mlmodelc"]
        ok = c.post("/v1/kernels", json={**body, "format": "mil"})
        assert ok.status_code == 200, ok.text
        problem = assert_problem(
            c.post("/v1/kernels", json={**body, "format": "aimodel"}), 503, "format"
        )
        assert "coreai-core" in problem["detail"]


def test_require_coreai_names_the_package(monkeypatch):
    monkeypatch.setattr("app.coreai.availability.coreai_version", lambda: None)
    with pytest.raises(FieldError) as caught:
        aimodel_of(build_kernel("conv", CONV, random_seed=0))
    assert caught.value.kind is ErrorKind.UNAVAILABLE and "coreai-core" in caught.value.message


def _page_section() -> str:
    page = (REPO / "docs" / "mlmodelc-and-coreai.md").read_text(encoding="utf-8")
    return page.split("## Core AI (.aimodel)")[1].split("\n## ")[0]


def test_the_pages_examples_build_what_they_say(tmp_path):
    """docs/mlmodelc-and-coreai.md's compile command and Python example (the docs tests run
    them too): both verified, the second by Apple's runtime."""
    section = _page_section()
    commands = section.split("```sh\n")[1].split("```")[0].replace("\\\n", " ")
    argv = shlex.split(commands.splitlines()[0])[1:]  # after .venv/bin/ane-kernels
    out = argv.index("-o") + 1
    argv[out] = str(tmp_path / argv[out])
    assert cli_main(argv) == 0
    with zipfile.ZipFile(argv[out]) as zf:
        assert json.loads(zf.read("verification.json"))["passed"]
    code = section.split("```python\n")[1].split("```")[0]
    scope: dict = {}
    exec(code, scope)
    with _zip(scope["zip_bytes"]) as zf:
        assert json.loads(zf.read("verification.json"))["apple_runtime"]["passed"]


def test_validate_checks_an_aimodel_with_apples_loader(tmp_path):
    path = tmp_path / "conv.aimodel.zip"
    path.write_bytes(kernel_zip("conv", CONV, format="aimodel", random_seed=0))
    report = validate(path)
    assert report.kind == "aimodel" and any("loaded by coreai-core" in n for n in report.notes)
    assert "0 ops" not in report.summary() and "loaded by coreai-core" in report.summary()
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            dst.writestr(item, data[:-1] + b"\0" if item.endswith("main.mlirb") else data)
    with pytest.raises(InvalidArtifact, match=r"main\.hash is not the sha256"):
        validate(broken)


def test_in_a_graph_the_refusal_names_the_node():
    graph = swiglu_ffn(16, 24, 8)
    graph["nodes"][0]["quantize"] = {"mode": "prune", "target_sparsity": 0.5}
    with pytest.raises(RequestError) as caught:
        prepare(KernelRequest.create(graph=graph, format="aimodel"), random_seed=0)
    assert caught.value.field == "nodes[0]"


def test_a_runtime_failure_during_verify_is_a_request_error_with_the_runtimes_message():
    build = build_kernel("conv", CONV, random_seed=0)
    files = dict(aimodel_of(build))
    files["main.mlirb"] = files["main.mlirb"][:64]  # a truncated program
    with pytest.raises(RequestError) as caught:
        with_apple_runtime({"passed": True, "outputs": {}, "states": {}}, build, files)
    assert caught.value.field == "verify"
    assert caught.value.message.startswith("Apple's runtime failed the .aimodel: ")
    assert len(caught.value.message) > len("Apple's runtime failed the .aimodel: ") + 10
