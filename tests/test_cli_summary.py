"""The build summary `compile`, `compile-graph` (local and on a server) and `model` print: the
preflight's errors and warnings, verification, quantization error, the estimate; `--json` too."""

import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, check=False
    )


def decode(cache_len: int) -> str:
    """The README's decode kernel (seq_len 1, decode mode), at a small hidden size."""
    return json.dumps(
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "seq_len": 1,
            "mode": "decode",
            "cache_len": cache_len,
        }
    )


def test_decode_at_cache_len_512_shows_the_silent_zeros_warning_that_511_clears(tmp_path):
    out = tmp_path / "d.zip"
    base = ("compile", "decoder_layer", "--random-weights", "0", "--format", "mil", "-o", str(out))
    at_512 = run(*base, "--params", decode(512), "--verify")
    assert at_512.returncode == 0, at_512.stderr
    text = at_512.stdout
    assert "matmul.runtime-inner-32" in text and "silent zeros" in text and "513" in text
    assert "softmax.pow2" in text
    assert "verify: passed: max_rel_error " in text
    assert "estimate: m1=" in text
    at_511 = run(*base, "--params", decode(511))
    assert at_511.returncode == 0, at_511.stderr
    assert "matmul.runtime-inner-32" not in at_511.stdout
    assert "softmax.pow2" not in at_511.stdout
    assert "preflight: error=0 warning=" in at_511.stdout and "verify:" not in at_511.stdout


def test_json_summary_for_scripts(tmp_path):
    out = tmp_path / "q.zip"
    done = run(
        "compile",
        "conv",
        "--params",
        '{"in_channels": 64, "out_channels": 32, "spatial": 4}',
        "--random-weights",
        "1",
        "--verify",
        "--quantize",
        '{"mode": "palettize", "nbits": 4}',
        "--target",
        "ios18",
        "--json",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["path"] == str(out) and summary["size"] == out.stat().st_size
    assert summary["preflight_counts"]["error"] == 0
    rules = {f["rule"] for f in summary["preflight"]}
    assert "quant.reported-failing" in rules and not any(r.startswith("rank.") for r in rules)
    assert summary["verification"]["passed"] is True
    assert 0 < summary["verification"]["max_rel_error"] <= summary["verification"]["tolerance"]
    assert summary["quantization"]["max_rel_error"] > 0 and summary["quantization"]["passed"]
    assert summary["estimate"].startswith("m1=")


def test_preflight_errors_are_shown(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(
        json.dumps(
            {
                "inputs": {"x": {"shape": [1, 4, 1, 64]}},
                "nodes": [
                    {
                        "id": "r",
                        "op": "reshape",
                        "inputs": {"x": "x"},
                        "params": {"shape": [1, 1, 1, 1, 4, 64]},
                    },
                    {
                        "id": "back",
                        "op": "reshape",
                        "inputs": {"x": "r"},
                        "params": {"shape": [1, 4, 1, 64]},
                    },
                ],
                "outputs": {"y": "back"},
            }
        )
    )
    # as written: the default passes fold the rank-6 pair away, leaving nothing to report
    done = run("compile-graph", str(graph), "-o", str(tmp_path / "g.zip"), "--passes", "none")
    assert done.returncode == 0, done.stderr
    assert "preflight: error=1 " in done.stdout
    assert "  error rank.core-ml-max x1 (r): " in done.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_a_server_build_is_summarised_like_a_local_one(server, tmp_path, as_json):
    out = tmp_path / "c.zip"
    flags = ("--json",) if as_json else ()
    done = run(
        "compile",
        "conv",
        "--params",
        '{"in_channels": 4, "out_channels": 8, "spatial": 3}',
        "--weights",
        f"weight={_weight(tmp_path)}",
        "--verify",
        "--server",
        server.url,
        "-o",
        str(out),
        *flags,
    )
    assert done.returncode == 0, done.stderr
    if as_json:
        summary = json.loads(done.stdout)
        assert summary["server"] == server.url and summary["verification"]["passed"]
        assert summary["preflight_counts"]["warning"] > 0
    else:
        assert f"from {server.url}" in done.stdout
        assert "preflight: error=0 warning=" in done.stdout and "verify: passed" in done.stdout


def _weight(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    return path


def test_a_quantization_without_an_error_limit_says_none_was_asked(tmp_path):
    done = run(
        "compile",
        "conv",
        "--params",
        '{"in_channels": 16, "out_channels": 16, "spatial": 4}',
        "--random-weights",
        "1",
        "--verify",
        "--quantize",
        '{"mode": "linear", "dtype": "int8"}',
        "-o",
        str(tmp_path / "q.zip"),
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("quantize: "))
    assert line.startswith("quantize: no limit asked (max_quantization_error): max_rel_error ")


def test_jobs_status_names_what_the_job_builds_and_its_artifact(server):
    from app.client import Client

    with Client(server.url) as c:
        job = c.submit("identity", {"channels": 8, "spatial": 4}, format="mil").wait(timeout=60)
    done = run("jobs", "status", job.id, "--server", server.url)
    assert done.returncode == 0, done.stderr
    artifact = job.data["artifact"]
    assert done.stdout.split() == [
        job.id,
        "succeeded",
        "identity",
        "(mil)",
        artifact["filename"],
        str(artifact["size"]),
        "bytes",
        artifact["digest"],
    ]
