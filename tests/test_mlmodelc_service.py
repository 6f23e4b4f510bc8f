""".mlmodelc without a Mac, through the service: every catalog kernel compiled by the linux backend
over HTTP (its bundle runs to the same outputs as its .mlpackage), as a job, from the CLI (the
same bytes), quantized kernels, the placement option's routing and errors, and Apple's own
bundles accepted by `validate` (and by `run` where the reference can run them)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from http_support import assert_problem, job_artifact, weight_arrays
from kernel_cases import SMALL, VARIANTS

from app.reference import Executor
from app.reference.executor import random_inputs
from app.reference.load import open_artifact

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

GOLDENS = Path(__file__).parent / "fixtures" / "goldens"
CASES = [
    (op, params, target)
    for op, params in [*SMALL.items(), *VARIANTS]
    for target in ("ios18", "ios17")
]
CONV = {"in_channels": 32, "out_channels": 16, "spatial": 8}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def outputs(path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return Executor(open_artifact(path).program).run(inputs).outputs


def same_outputs(compiled: Path, package: Path, seed: int = 3) -> None:
    """The bundle and its package give equal outputs for the same inputs, matched by name: a
    bundle's model.mil lists its inputs sorted and its description keeps states apart, so a
    stateful function's parameter order cannot be recovered from it."""
    inputs = random_inputs(open_artifact(package).program.main, seed)
    got, want = outputs(compiled, inputs), outputs(package, inputs)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def body(op: str, params: dict, target: str, fmt: str, **extra) -> dict:
    weights = {k: v.tolist() for k, v in weight_arrays(op, params, seed=4).items()}
    return {"op": op, **params, "weights": weights, "target": target, "format": fmt, **extra}


@pytest.mark.parametrize(
    ("op", "params", "target"), CASES, ids=[f"{c[0]}-{i}-{c[2]}" for i, c in enumerate(CASES)]
)
def test_every_catalog_kernel_compiles_over_http_and_runs_as_its_package(
    client, tmp_path, op, params, target
):
    package = client.post("/v1/kernels", json=body(op, params, target, "mlpackage"))
    if package.status_code == 422 and target == "ios17":
        pytest.skip(f"{op} is ios18-only")  # sdpa and the state ops
    assert package.status_code == 200, package.text
    compiled = client.post("/v1/kernels", json=body(op, params, target, "mlmodelc"))
    assert compiled.status_code == 200, compiled.text
    (tmp_path / "p.zip").write_bytes(package.content)
    (tmp_path / "c.zip").write_bytes(compiled.content)
    with zipfile.ZipFile(tmp_path / "c.zip") as zf:
        kernel = json.loads(zf.read("kernel.json"))
        assert f"{op}.mlmodelc/coremldata.bin" in zf.namelist()
    assert kernel["format"] == "mlmodelc" and kernel["compiler"]["backend"] == "linux"
    assert kernel["compiler"]["toolchain"]["coremlcompiler"] == "3500.32.1"
    assert open_artifact(tmp_path / "c.zip").kind == "mlmodelc"
    same_outputs(tmp_path / "c.zip", tmp_path / "p.zip")
    job, content = job_artifact(client, body(op, params, target, "mlmodelc"))
    assert content == compiled.content and job["toolchain"]["compiler"] == "linux"


@pytest.mark.parametrize(("op", "params"), list(SMALL.items()))
def test_every_catalog_kernel_compiles_from_the_cli(tmp_path, op, params):
    from app.cli import main

    for fmt in ("mlpackage", "mlmodelc"):
        code = main(
            [
                "compile",
                op,
                "--params",
                json.dumps(params),
                "--random-weights",
                "2",
                "--format",
                fmt,
                "--verify",
                "-o",
                str(tmp_path / f"{fmt}.zip"),
            ]
        )
        assert code == 0
    with zipfile.ZipFile(tmp_path / "mlmodelc.zip") as zf:
        assert json.loads(zf.read("verification.json"))["passed"]
    same_outputs(tmp_path / "mlmodelc.zip", tmp_path / "mlpackage.zip")


@pytest.mark.parametrize(
    "config",
    [
        {"mode": "palettize", "nbits": 4},
        {"mode": "linear", "dtype": "int8"},
        {"mode": "prune", "target_sparsity": 0.5, "dtype": "int8"},
    ],
)
def test_quantized_kernels_compile_and_run_as_their_package(client, tmp_path, config):
    for fmt in ("mlpackage", "mlmodelc"):
        answer = client.post("/v1/kernels", json=body("conv", CONV, "ios18", fmt, quantize=config))
        assert answer.status_code == 200, answer.text
        (tmp_path / f"{fmt}.zip").write_bytes(answer.content)
    assert cli("validate", str(tmp_path / "mlmodelc.zip")).returncode == 0
    same_outputs(tmp_path / "mlmodelc.zip", tmp_path / "mlpackage.zip")


def test_a_job_the_cli_and_the_api_give_the_same_bundle(client, tmp_path):
    request = body("conv", CONV, "ios18", "mlmodelc", name="same")
    sync = client.post("/v1/kernels", json=request)
    assert sync.status_code == 200, sync.text
    job, content = job_artifact(client, request)
    assert content == sync.content
    assert job["queue"] == "ane-linux" and job["toolchain"]["compiler"] == "linux"

    np.save(tmp_path / "w.npy", np.asarray(request["weights"]["weight"], np.float32))
    out = tmp_path / "cli.zip"
    made = cli(
        "compile",
        "conv",
        "--params",
        json.dumps(CONV),
        "--weights",
        f"weight={tmp_path / 'w.npy'}",
        "--format",
        "mlmodelc",
        "--name",
        "same",
        "-o",
        str(out),
    )
    assert made.returncode == 0, made.stderr
    assert out.read_bytes() == sync.content

    # The package alone, through `mlmodelc` and back through `decompile`.
    package_zip = client.post("/v1/kernels", json={**request, "format": "mlpackage"}).content
    zipfile.ZipFile(io.BytesIO(package_zip)).extractall(tmp_path / "pkg")
    bundle = tmp_path / "same.mlmodelc"
    assert cli("mlmodelc", str(tmp_path / "pkg/same.mlpackage"), "-o", str(bundle)).returncode == 0
    with zipfile.ZipFile(out) as zf:
        for name in zf.namelist():
            if name.startswith("same.mlmodelc/"):
                assert (tmp_path / name).read_bytes() == zf.read(name), name
    rebuilt = cli("decompile", str(bundle), "-o", str(tmp_path / "rebuilt.mlpackage"))
    assert rebuilt.returncode == 0 and "coremlcompiler 3500.32.1" in rebuilt.stdout
    assert cli("validate", str(tmp_path / "rebuilt.mlpackage")).returncode == 0


def test_placement_needs_a_mac_and_a_compiled_format(client):
    request = body("conv", CONV, "ios18", "mlmodelc", placement=True)
    problem = assert_problem(client.post("/v1/kernels", json=request), 503, "placement")
    assert "macOS worker" in problem["detail"]
    assert_problem(client.post("/v1/jobs", json=request), 503, "placement")
    wrong = client.post("/v1/kernels", json={**request, "format": "mil"})
    assert_problem(wrong, 422, "placement")
    assert client.get("/healthz").status_code == 200


def test_apple_compiled_bundles_validate_and_run_or_say_why(tmp_path):
    bundles = sorted((GOLDENS / "silero-vad").glob("*/*.mlmodelc"))
    assert len(bundles) == 4
    for bundle in [*bundles, GOLDENS / "coremltools-add_model/add_model.mlmodelc"]:
        checked = cli("validate", str(bundle))
        assert checked.returncode == 0 and checked.stdout.startswith("valid mlmodelc"), checked
    ran = cli("run", str(bundles[0]), "--random-inputs", "1", "--output-dir", str(tmp_path / "o"))
    assert ran.returncode == 1 and "the reference runs programs of specification 8" in ran.stderr
    assert not (tmp_path / "o").exists()


def test_bad_bundles_and_profiles_exit_2_naming_the_fault(tmp_path):
    bundle = tmp_path / "broken.mlmodelc"
    bundle.mkdir()
    (bundle / "coremldata.bin").write_bytes(b"\0" * 8)
    (bundle / "model.mil").write_text("program(1.3)\n{\n  func main<ios18>(")
    bad = cli("decompile", str(bundle), "-o", str(tmp_path / "x.mlpackage"))
    assert bad.returncode == 2 and "coremldata.bin" in bad.stderr
    assert not (tmp_path / "x.mlpackage").exists()
    source = GOLDENS / "silero-vad/unified_int8/source.mlpackage"
    malformed = cli(
        "mlmodelc", str(source), "-o", str(tmp_path / "y.mlmodelc"), "--coremlc-version", "newest"
    )
    assert malformed.returncode == 2 and "'newest' is not a release number" in malformed.stderr
    assert not (tmp_path / "y.mlmodelc").exists()
    # a release never observed is written, and the command says whose rules it used
    unseen = cli(
        "mlmodelc",
        str(source),
        "-o",
        str(tmp_path / "y.mlmodelc"),
        "--coremlc-version",
        "3505.4.1",
        "--mil-version",
        "3510.2.1",
    )
    assert unseen.returncode == 0, unseen.stderr
    assert "layout rules of 3500.32.1: not observed" in unseen.stdout
    assert '"coremlc-version", "3505.4.1"' in (tmp_path / "y.mlmodelc/model.mil").read_text()
