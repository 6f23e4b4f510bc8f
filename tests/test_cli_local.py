"""The `ane-kernels` command line, run as a real process."""

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from app.kernels import CATALOG

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def test_ops_lists_the_catalog():
    out = run("ops")
    assert out.returncode == 0
    for name in CATALOG:
        assert name in out.stdout
    ops = json.loads(run("ops", "--json").stdout)
    assert [o["name"] for o in ops] == list(CATALOG)
    conv = ops[0]
    assert conv["parameters"]["required"] == ["in_channels", "out_channels", "spatial"]
    assert [w["name"] for w in conv["weights"]] == ["weight", "bias"]
    assert conv["inputs"][0]["name"] == "x" and conv["outputs"][0]["name"] == "y"


def test_compile_with_weight_files_then_validate(tmp_path):
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    out = tmp_path / "conv.zip"
    params = '{"in_channels": 4, "out_channels": 8, "spatial": 3}'
    done = run(
        "compile",
        "conv",
        "--params",
        params,
        "--weights",
        f"weight={tmp_path / 'w.npy'}",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "conv.mlpackage/Manifest.json" in zipfile.ZipFile(out).namelist()
    check = run("validate", str(out))
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("valid mlpackage")


@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_random_weights_and_formats(tmp_path, fmt):
    out = tmp_path / "n.zip"
    params = '{"channels": 64, "spatial": 8}'
    done = run(
        "compile",
        "rmsnorm",
        "--params",
        params,
        "--random-weights",
        "5",
        "--format",
        fmt,
        "--target",
        "ios17",
        "--name",
        "norm",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(zipfile.ZipFile(out).read("kernel.json"))["target"] == "ios17"
    assert run("validate", str(out)).returncode == 0


def test_validate_reports_invalid_packages(tmp_path):
    out = tmp_path / "c.zip"
    run("compile", "identity", "--params", '{"channels": 16, "spatial": 2}', "-o", str(out))
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("weight.bin"):
                data = data[:100]  # truncated weights
            dst.writestr(item, data)
    bad = run("validate", str(broken))
    assert bad.returncode == 1
    assert "invalid:" in bad.stderr and "weight.bin" in bad.stderr
    missing = run("validate", str(tmp_path / "nope.zip"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    garbage = tmp_path / "g.zip"
    garbage.write_bytes(b"PK not really")
    assert run("validate", str(garbage)).returncode == 1


def test_validate_catches_a_description_that_lies(tmp_path):
    from coremltools.proto import Model_pb2

    out = tmp_path / "c.zip"
    run("compile", "identity", "--params", '{"channels": 16, "spatial": 2}', "-o", str(out))
    lying = tmp_path / "lying.zip"
    model_path = "identity.mlpackage/Data/com.apple.CoreML/model.mlmodel"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(lying, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == model_path:
                spec = Model_pb2.Model.FromString(data)
                spec.description.output[0].type.multiArrayType.shape[1] = 32
                data = spec.SerializeToString()
            dst.writestr(item, data)
    bad = run("validate", str(lying))
    assert bad.returncode == 1 and "description shape" in bad.stderr


def test_validate_parses_mil_bundles(tmp_path):
    out = tmp_path / "c.zip"
    run(
        "compile",
        "conv",
        "--params",
        '{"in_channels": 16, "out_channels": 8, "spatial": 2}',
        "--random-weights",
        "0",
        "--format",
        "mil",
        "-o",
        str(out),
    )
    assert run("validate", str(out)).returncode == 0
    wrong = tmp_path / "wrong.zip"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(wrong, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "model.mil":  # a declared output shape the op does not produce
                data = data.replace(
                    b"tensor<fp16, [1, 8, 1, 2]> y", b"tensor<fp16, [1, 9, 1, 2]> y"
                )
            dst.writestr(item, data)
    bad = run("validate", str(wrong))
    assert bad.returncode == 1 and "declared tensor<fp16, [1, 9, 1, 2]>" in bad.stderr


def test_compile_with_quantize_and_its_errors(tmp_path):
    out = tmp_path / "q.zip"
    params = '{"in_channels": 64, "out_channels": 32, "spatial": 4}'
    base = ("compile", "conv", "--params", params, "--random-weights", "1", "-o", str(out))
    done = run(
        *base,
        "--quantize",
        '{"mode": "linear", "dtype": "int4", "granularity": "per_block", "block_size": 16}',
        "--verify",
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out) as zf:
        assert (
            json.loads(zf.read("kernel.json"))["weights"]["weight"]["quantized"]["dtype"] == "int4"
        )
        assert json.loads(zf.read("verification.json"))["quantization"]["max_rel_error"] > 0
    out.unlink()

    for extra, fragment in (
        (("--quantize", '{"mode": "palettize", "nbits": 5}'), "quantize.nbits"),
        (("--quantize", "[4]"), "--quantize must be a JSON object"),
        (
            ("--quantize", '{"mode": "palettize", "nbits": 1}', "--max-quantization-error", "1e-4"),
            "max_quantization_error",
        ),
    ):
        bad = run(*base, *extra)
        assert bad.returncode == 2 and fragment in bad.stderr, bad.stderr
        assert not out.exists()  # nothing half-written
