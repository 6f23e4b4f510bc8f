"""Command-line paths that used to crash or mislead: each ends in a message that says what to do
(exit 2), or does what the server does with the same request."""

import io
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from checkpoint_support import LLAMA, write_checkpoint
from conftest import free_port
from packaging.version import Version

from app.client import Client

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

REPO = Path(__file__).resolve().parent.parent
STACK = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "seq_len": 2,
    "first_layer": 0,
    "num_layers": 3,
    "split": True,
}


def run(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


def layer_bytes() -> int:
    from app.kernels.decoder_stack import DecoderStackParams, layer_bytes

    return layer_bytes(DecoderStackParams.model_validate(STACK))


def test_the_local_cli_splits_by_the_budget_setting_as_the_server_does(tmp_path):
    out = tmp_path / "s.zip"
    base = (
        "compile",
        "decoder_stack",
        "--params",
        json.dumps(STACK),
        "--random-weights",
        "0",
        "--format",
        "mil",
        "-o",
        str(out),
    )
    budget = str(2 * layer_bytes())
    done = run(*base, ANE_MAX_PROGRAM_WEIGHT_BYTES=budget)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out) as z:
        assert len(json.loads(z.read("chain.json"))["programs"]) == 2
    refused = run(*base, ANE_MAX_PROGRAM_WEIGHT_BYTES=str(layer_bytes() - 1))
    assert refused.returncode == 2
    assert "ANE_MAX_PROGRAM_WEIGHT_BYTES" in refused.stderr
    assert f"to at least {layer_bytes()}" in refused.stderr


def test_compile_graph_honours_the_files_format_and_verify(tmp_path, server):
    graph = {
        "inputs": {"x": {"shape": [1, 8, 1, 4]}},
        "nodes": [{"id": "r", "op": "relu", "inputs": {"x": "x"}}],
        "outputs": {"y": "r"},
        "format": "mil",
        "verify": True,
    }
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph))
    for extra in ((), ("--server", server.url)):
        out = tmp_path / f"g{len(extra)}.zip"
        done = run("compile-graph", str(path), "-o", str(out), *extra)
        assert done.returncode == 0, done.stderr
        names = zipfile.ZipFile(out).namelist()
        assert "model.mil" in names and "verification.json" in names, names
    with Client(server.url) as c:
        names = zipfile.ZipFile(io.BytesIO(c.compile_graph(graph))).namelist()
    assert "model.mil" in names and "verification.json" in names
    flag = tmp_path / "flag.zip"  # a flag still wins over the file
    assert run("compile-graph", str(path), "--format", "mlpackage", "-o", str(flag)).returncode == 0
    assert any(n.endswith("Manifest.json") for n in zipfile.ZipFile(flag).namelist())


def test_checkpoint_faults_say_what_to_do(tmp_path):
    path, _, _ = write_checkpoint(tmp_path / "model", LLAMA)
    conv = run(
        "compile", "conv", "--checkpoint", str(path), "--layer", "0", "-o", str(tmp_path / "c.zip")
    )
    assert conv.returncode == 2 and "Traceback" not in conv.stderr
    assert "decoder_layer" in conv.stderr and "checkpoint" in conv.stderr
    far = run(
        "compile",
        "decoder_layer",
        "--checkpoint",
        str(path),
        "--layer",
        "5",
        "--params",
        '{"seq_len": 2}',
        "-o",
        str(tmp_path / "d.zip"),
    )
    assert far.returncode == 2 and "the model has 3 layers (0-2" in far.stderr


def test_jobs_without_a_server_say_where_they_looked(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    done = run("jobs", "list", ANE_SERVER=url)
    assert done.returncode == 4
    assert f"cannot reach {url}" in done.stderr and "--server" in done.stderr
    assert "None" not in done.stderr


def test_mlmodelc_on_a_kernel_zip_says_to_unzip(tmp_path):
    kernel = tmp_path / "k.zip"
    made = run(
        "compile", "identity", "--params", '{"channels": 16, "spatial": 2}', "-o", str(kernel)
    )
    assert made.returncode == 0, made.stderr
    done = run("mlmodelc", str(kernel), "-o", str(tmp_path / "k.mlmodelc"))
    assert done.returncode == 2
    assert "unzip" in done.stderr and "Wire format" not in done.stderr


def test_every_validation_error_is_shown(tmp_path):
    done = run(
        "compile",
        "conv",
        "--params",
        '{"in_channels": 4, "out_chanels": 8}',
        "-o",
        str(tmp_path / "c.zip"),
    )
    assert done.returncode == 2
    for field in ("params.out_channels", "params.spatial", "params.out_chanels"):
        assert field in done.stderr, done.stderr


def test_the_declared_coremltools_floor_is_the_release_tested():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("coremltools")]
    floor = Version(spec.split(">=")[1])
    installed = Version(version("coremltools"))
    assert installed >= floor and installed.release[:2] == floor.release[:2], (spec, installed)


def _writers(folder: Path) -> dict[str, list[str]]:
    """Every command that writes `-o`, with inputs it would build from (`folder` holds them)."""
    conv = '{"in_channels": 4, "out_channels": 4, "spatial": 4}'
    return {
        "compile": ["compile", "conv", "--params", conv, "--random-weights", "0"],
        "compile-graph": ["compile-graph", str(folder / "graph.json")],
        "mlmodelc": ["mlmodelc", str(folder / "conv.mlpackage")],
        "decompile": ["decompile", str(folder / "conv.mlmodelc")],
        "model": ["model", str(folder / "qwen3"), "--context", "16", "--prefill", "4"],
        "jobs download": ["jobs", "download", "0" * 64],
    }


def test_every_output_into_a_missing_folder_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    """`-o nodir/sub/x` (the folder not made yet): exit 2 naming -o and the folder, before any
    work, and nothing written anywhere: not beside it, not in the (default, relative) data dir."""
    from kit_support import KIT_QWEN3, write_model

    from app.cli import main

    inputs = tmp_path / "inputs"
    write_model(inputs / "qwen3", KIT_QWEN3, seed=2)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in [k for k in os.environ if k.startswith("ANE_")]:
        monkeypatch.delenv(name)
    for command, args in _writers(inputs).items():
        assert main([*args, "-o", "nodir/sub/out.zip"]) == 2, command
        err = capsys.readouterr().err
        assert err.startswith("error: -o/--output: nodir/sub/out.zip: nodir/sub does not exist")
        assert list(work.iterdir()) == [], command  # no data/, no temp file, no folder


def test_a_kit_into_a_missing_folder_says_so_without_a_traceback(tmp_path):
    """As a user runs it: the program, not the function."""
    from kit_support import KIT_QWEN3, write_model

    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=2)
    done = run("model", str(folder), "-o", str(tmp_path / "nodir" / "kit.zip"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "-o/--output" in done.stderr and "does not exist" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qwen3"]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ANE_MAX_VERIFY_BYTES": "abc"}, "ANE_MAX_VERIFY_BYTES='abc'"),  # read by the build
        ({"ANE_PALETTE_WORKERS": "-1"}, "ANE_PALETTE_WORKERS='-1'"),
        ({"ANE_MAX_UPLOAD_BYTES": str(1 << 40), "ANE_BLOB_MAX_BYTES": "10"}, "ANE_BLOB_MAX_BYTES"),
    ],
    ids=["not-a-number", "out-of-range", "two-settings-disagree"],
)
def test_a_bad_setting_is_a_usage_error_naming_it_before_anything_runs(tmp_path, env, named):
    """A bad ANE_* value used to surface as a pydantic traceback from deep in the command
    (exit 1), after the command had started; now every command checks them first."""
    out = tmp_path / "x.zip"
    done = run(
        "compile", "identity", "--params", '{"channels": 4, "spatial": 2}', "-o", str(out), **env
    )
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_bad_setting_stops_the_service_at_start_naming_it():
    """`uvicorn app.main:app` (what `make run` starts) with a bad ANE_* value: it used to print
    pydantic's traceback; now one line naming the variable, and no server."""
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(port)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ANE_WORKERS": "0"},
        check=False,
    )
    assert done.returncode != 0
    assert "error: ANE_WORKERS='0'" in done.stderr and "Traceback" not in done.stderr, done.stderr
