"""verification.json (verify_build / verification_entry) and the CLI's `compile --verify` and `run`."""

import dataclasses
import io
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from kernel_cases import SMALL, VARIANTS

from app.catalog_build import build_kernel
from app.cli import main
from app.errors import RequestError
from app.kernels import CATALOG
from app.packaging import write_kernel_zip
from app.reference import Executor
from app.reference.verify import MAX_VERIFY_ELEMENTS, compare, verification_entry, verify_build


def _cases():
    for op, params in [*SMALL.items(), *VARIANTS]:
        yield pytest.param(op, params, id=f"{op}-{len(params)}")


@pytest.mark.parametrize(("op", "params"), list(_cases()))
def test_every_catalog_kernel_verifies(op, params):
    build = build_kernel(op, params, random_seed=1)
    report = verify_build(build, seed=3)
    json.dumps(report, allow_nan=False)  # plain JSON: no NaN or inf sneaks in
    assert report["op"] == op and report["seed"] == 3
    assert set(report["outputs"]) == {v.name for v in build.program.main.outputs}
    for check in (*report["outputs"].values(), *report["states"].values()):
        assert check["tolerance"] == CATALOG[op].tolerance
        assert check["max_rel_error"] <= CATALOG[op].tolerance, check
        assert check["passed"]
    assert report["fp16_overflow"] is False and report["nan"] is False
    assert report["passed"]


def test_state_kernels_report_the_buffer_too():
    report = verify_build(build_kernel("update_state", SMALL["update_state"]))
    assert report["inputs"]["kv"]["state"] is True
    assert report["states"]["kv"]["max_abs_error"] == 0.0 and report["states"]["kv"]["passed"]


def test_a_wrong_program_fails_verification():
    """The program of another request (transposed weights) under this request's params."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 6)).astype(np.float32)
    params = {"in_channels": 6, "out_channels": 6, "spatial": 2}
    build = build_kernel("conv", params, {"weight": w})
    wrong = dataclasses.replace(
        build, program=build_kernel("conv", params, {"weight": w.T}).program
    )
    assert verify_build(build)["passed"]
    report = verify_build(wrong)
    assert not report["passed"] and report["outputs"]["y"]["max_rel_error"] > 0.1


def test_reports_are_deterministic_and_follow_the_seed():
    build = build_kernel("rmsnorm", {"channels": 32, "spatial": 4}, random_seed=0)
    a, b, c = verify_build(build, 0), verify_build(build, 0), verify_build(build, 1)
    assert a == b
    assert a["outputs"]["y"]["max_abs_error"] != c["outputs"]["y"]["max_abs_error"]


def test_verification_entry_goes_into_the_zip():
    build = build_kernel("scale", SMALL["scale"], random_seed=0)
    buf = io.BytesIO()
    write_kernel_zip(build, buf, "mil", extra_entries=[verification_entry(build)])
    with zipfile.ZipFile(buf) as zf:
        report = json.loads(zf.read("verification.json"))
    assert report == verify_build(build) and report["passed"]


def test_kernels_too_large_to_verify_are_refused_with_the_field():
    side = int(MAX_VERIFY_ELEMENTS**0.5) + 1
    build = build_kernel("identity", {"channels": 1, "spatial": 1})
    # only the size check runs: a program whose input is one element past the limit
    big = build_kernel(
        "gqa_expand", {"kv_heads": 1, "q_heads": 1, "head_dim": side, "seq_len": side}
    )
    assert verify_build(build)["passed"]
    with pytest.raises(RequestError) as err:
        verify_build(big)
    assert err.value.field == "verify" and "elements" in err.value.message


# -- CLI (real processes) ----------------------------------------------------------------------


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def cli_in_process(capsys, *args) -> tuple[int, str]:
    """The same `main` the console script runs, called in this process (a subprocess per case
    would spend seconds importing coremltools); returns (exit code, stderr)."""
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_compile_verify_then_run_with_input_files(tmp_path, capsys, fmt):
    params = '{"in_channels": 8, "out_channels": 4, "spatial": 3, "bias": true}'
    out = tmp_path / "conv.zip"
    code, err = cli_in_process(
        capsys,
        "compile",
        "conv",
        "--params",
        params,
        "--random-weights",
        "1",
        "--format",
        fmt,
        "--verify",
        "-o",
        str(out),
    )
    assert code == 0, err
    report = json.loads(zipfile.ZipFile(out).read("verification.json"))
    assert report["passed"] and report["outputs"]["y"]["max_rel_error"] <= CATALOG["conv"].tolerance

    x = np.random.default_rng(0).standard_normal((1, 8, 1, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    args = [
        "run",
        str(out),
        "--input",
        f"x={tmp_path / 'x.npy'}",
        "--output-dir",
        str(tmp_path / "o"),
    ]
    if fmt == "mil":  # once as a real process: the console entry point, with a clean stderr
        done = cli(*args)
        code, err = done.returncode, done.stderr
        assert "wrote" in done.stdout and err == ""
    else:
        code, err = cli_in_process(capsys, *args)
    assert code == 0, err
    y = np.load(tmp_path / "o" / "y.npy")
    build = build_kernel("conv", json.loads(params), random_seed=1)
    expected = Executor.from_written_weights(build.program).run({"x": x}).outputs["y"]
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, expected)


def test_run_with_random_inputs_and_a_state(tmp_path, capsys):
    out = tmp_path / "upd.zip"
    params = '{"state_name": "kv", "shape": [2, 3]}'
    assert (
        cli_in_process(capsys, "compile", "update_state", "--params", params, "-o", str(out))[0]
        == 0
    )
    value = np.arange(6, dtype=np.float16).reshape(2, 3)
    np.save(tmp_path / "value.npy", value)
    code, err = cli_in_process(
        capsys,
        "run",
        str(out),
        "--input",
        f"value={tmp_path / 'value.npy'}",
        "--random-inputs",
        "4",
        "--output-dir",
        str(tmp_path / "o"),
    )
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), value)
    # seeded draws are reproducible
    for name in ("r1", "r2"):
        assert (
            cli_in_process(
                capsys,
                "run",
                str(out),
                "--random-inputs",
                "4",
                "--output-dir",
                str(tmp_path / name),
            )[0]
            == 0
        )
    np.testing.assert_array_equal(
        np.load(tmp_path / "r1" / "y.npy"), np.load(tmp_path / "r2" / "y.npy")
    )


def test_run_errors_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "id.zip"
    assert (
        cli_in_process(
            capsys,
            "compile",
            "identity",
            "--params",
            '{"channels": 4, "spatial": 2}',
            "--format",
            "mil",
            "-o",
            str(out),
        )[0]
        == 0
    )
    np.save(tmp_path / "bad.npy", np.zeros((1, 4, 1, 3), np.float16))
    cases = [
        (
            ["--input", f"z={tmp_path / 'bad.npy'}"],
            "error: inputs.z: unknown input; this program takes x",
        ),
        (
            ["--input", f"x={tmp_path / 'bad.npy'}"],
            "error: inputs.x: expected shape [1, 4, 1, 2], received [1, 4, 1, 3]",
        ),
        (["--input", f"x={tmp_path / 'missing.npy'}"], "error: inputs.x: cannot read"),
        ([], "error: inputs.x: missing input of shape [1, 4, 1, 2] (fp16)"),
        (["--input", "x"], "error: --input: expects NAME=FILE.npy"),
    ]
    for extra, message in cases:
        code, err = cli_in_process(
            capsys, "run", str(out), *extra, "--output-dir", str(tmp_path / "o")
        )
        assert code == 2 and message in err, (extra, err)
        assert not (tmp_path / "o").exists()
    code, err = cli_in_process(
        capsys, "run", str(tmp_path / "nope.zip"), "--output-dir", str(tmp_path / "o")
    )
    assert code == 2 and "nope.zip does not exist" in err
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    code, err = cli_in_process(
        capsys, "run", str(tmp_path / "junk.zip"), "--output-dir", str(tmp_path / "o")
    )
    assert code == 1 and err.startswith("invalid:")


def test_an_output_of_another_shape_fails_naming_both_shapes():
    """An import whose output's shape differs from its model's (a pool one window longer than
    onnxruntime's was) fails its verification; it does not broadcast, or raise."""
    got, exact = np.zeros((1, 2, 5, 3)), np.zeros((1, 2, 5, 2))
    report = compare(got, exact, 0.01)
    assert report["passed"] is False and report["max_rel_error"] is None
    assert (report["shape"], report["expected_shape"]) == ([1, 2, 5, 3], [1, 2, 5, 2])
    assert "shape" not in compare(exact, exact, 0.01) and compare(exact, exact, 0.01)["passed"]
