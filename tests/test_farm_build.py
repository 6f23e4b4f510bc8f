"""`ane-kernels build MANIFEST.toml` against a real uvicorn server (in-process engine, the labelled
stand-in xcrun for .mlmodelc): builds, reruns as cache hits with zero uploads, --check, resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from http_support import metric
from safetensors.numpy import save_file

from app.artifacts import kernel_zip

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

FAKE_XCRUN = Path(__file__).parent / "fake_xcrun"

MANIFEST = """
[defaults]
format = "mlpackage"

[kernels.q_proj]
op = "conv"
params = { in_channels = 64, out_channels = 64, spatial = 16 }
weights = { weight = "w/q.npy" }

[kernels.o_proj]
op = "conv"
params = { in_channels = 64, out_channels = 64, spatial = 16 }
weights = { weight = "w/q.npy" }
quantize = { mode = "linear", dtype = "int8" }

[kernels.k_proj]
op = "conv"
params = { in_channels = 64, out_channels = 32, spatial = 16, bias = true }
weights = { weight = "w/attn.safetensors#k", bias = "w/attn.safetensors#k_bias" }

[kernels.v_proj]
op = "matmul"
params = { in_features = 64, out_features = 32, tokens = 16 }
weights = { weight = "w/attn.safetensors#v" }
target = "ios17"

[kernels.norm]
op = "rmsnorm"
params = { channels = 64, spatial = 16, eps = 1e-6 }
weights = { weight = "w/norm.npy" }

[kernels.norm_l2]
op = "rmsnorm"
params = { channels = 64, spatial = 16, variant = "l2norm" }
weights = { weight = "w/norm.npy" }

[kernels.gain]
op = "scale"
params = { channels = 64, spatial = 16 }
weights = { scale = "w/norm.npy" }

[kernels.expand]
op = "gqa_expand"
params = { kv_heads = 2, q_heads = 4, head_dim = 16, seq_len = 16 }

[kernels.attention]
op = "sdpa"
params = { n_heads = 4, head_dim = 16, seq_len = 16, causal = true }
format = "mil"

[kernels.probe]
op = "identity"
params = { channels = 32, spatial = 4 }
format = "mlmodelc"

[kernels.cache]
op = "update_state"
params = { state_name = "kv", shape = [1, 2, 16, 16] }
"""


def _write_project(root: Path) -> Path:
    rng = np.random.default_rng(5)
    (root / "w").mkdir(parents=True)
    np.save(root / "w/q.npy", (rng.standard_normal((64, 64)) / 8).astype(np.float32))
    np.save(root / "w/norm.npy", (1 + rng.standard_normal(64) / 10).astype(np.float32))
    save_file(
        {
            "k": (rng.standard_normal((32, 64)) / 8).astype(np.float16),
            "k_bias": rng.standard_normal(32).astype(np.float16),
            "v": (rng.standard_normal((32, 64)) / 8).astype(np.float32),
        },
        str(root / "w/attn.safetensors"),
    )
    manifest = root / "kernels.toml"
    manifest.write_text(MANIFEST)
    return manifest


@pytest.fixture(scope="module")
def farm_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("farm")
    log = tmp / "xcrun.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{FAKE_XCRUN}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("FAKE_XCRUN_LOG", str(log))
        mp.setenv("FAKE_XCRUN_SLEEP", "probe=3")  # a slow compile to interrupt
        with uvicorn_server(tmp / "data", compiler="xcrun") as url:
            yield url, log


def build(url: str, manifest: Path, out: Path, *extra: str, **popen) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "app.cli",
        "build",
        str(manifest),
        "--server",
        url,
        "--out",
        str(out),
        *extra,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **popen)


def _counts(url: str) -> dict[str, float]:
    with httpx.Client(base_url=url) as c:
        return {
            "builds": metric(c, "ane_builds_total"),
            "uploads": metric(c, "ane_http_requests_total", route="/v1/blobs", method="POST"),
        }


def test_manifest_builds_reruns_as_cache_hits_and_checks(farm_server, tmp_path):
    url, _ = farm_server
    manifest = _write_project(tmp_path)
    out = tmp_path / "out"
    first = build(url, manifest, out, "--json")
    assert first.returncode == 0, first.stderr + first.stdout
    summary = json.loads(first.stdout)["kernels"]
    assert len(summary) == 11 and {v["status"] for v in summary.values()} == {"built"}
    lock_path = tmp_path / "ane-kernels.lock"
    lock = lock_path.read_bytes()
    entries = json.loads(lock)["kernels"]
    assert set(entries) == set(summary)
    for entry in entries.values():
        assert entry["request_key"] and entry["artifact"].startswith("sha256:")
        assert entry["toolchain"]["generator"]["name"] == "ane-kernels"
        assert (out / entry["file"]).is_file()
    assert "compiler" in entries["probe"]["toolchain"]  # the mlmodelc job recorded its toolchain
    assert "probe.mlmodelc/" in {
        n.split("/")[0] + "/" for n in zipfile.ZipFile(out / entries["probe"]["file"]).namelist()
    }
    # What the farm built is what a local compile builds, byte for byte.
    q = np.load(tmp_path / "w/q.npy")
    local = kernel_zip(
        "conv", {"in_channels": 64, "out_channels": 64, "spatial": 16}, {"weight": q}, name="q_proj"
    )
    assert (out / entries["q_proj"]["file"]).read_bytes() == local
    quantized = kernel_zip(
        "conv",
        {"in_channels": 64, "out_channels": 64, "spatial": 16},
        {"weight": q},
        name="o_proj",
        quantize={"mode": "linear", "dtype": "int8"},
    )
    assert (out / entries["o_proj"]["file"]).read_bytes() == quantized != local

    # Nothing changed: no uploads, no builds, the same lock byte for byte.
    before = _counts(url)
    again = build(url, manifest, out, "--json")
    assert again.returncode == 0, again.stderr
    assert {v["status"] for v in json.loads(again.stdout)["kernels"].values()} == {"up to date"}
    assert _counts(url) == before and lock_path.read_bytes() == lock

    # A fresh checkout (no zips on disk): every kernel is a server cache hit, still zero uploads.
    shutil.rmtree(out)
    fresh = build(url, manifest, out, "--json")
    assert fresh.returncode == 0, fresh.stderr
    assert _counts(url) == before and lock_path.read_bytes() == lock
    assert all((out / e["file"]).is_file() for e in entries.values())

    # --check passes on an unchanged manifest and fails (exit 3) once a parameter changes.
    assert build(url, manifest, out, "--check").returncode == 0
    manifest.write_text(MANIFEST.replace("eps = 1e-6", "eps = 1e-5"))
    check = build(url, manifest, out, "--check")
    assert check.returncode == 3 and "norm" in check.stdout
    assert lock_path.read_bytes() == lock  # --check writes nothing


def test_interrupted_build_resumes(farm_server, tmp_path):
    url, _ = farm_server
    manifest = _write_project(tmp_path)
    out = tmp_path / "out"
    # One kernel at a time, in name order: "probe" (a 3 s stand-in compile, new parameters so not
    # cached) comes eighth. Interrupt while it compiles.
    slow = MANIFEST.replace("channels = 32, spatial = 4 }", "channels = 48, spatial = 4 }")
    manifest.write_text(slow)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [
        sys.executable,
        "-m",
        "app.cli",
        "build",
        str(manifest),
        "--server",
        url,
        "--out",
        str(out),
        "--concurrency",
        "1",
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    lock_path = tmp_path / "ane-kernels.lock"
    deadline = time.monotonic() + 120
    while not (lock_path.exists() and len(json.loads(lock_path.read_text())["kernels"]) >= 7):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no kernel finished"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    partial = json.loads(lock_path.read_text())["kernels"]
    if proc.returncode == 0:
        pytest.skip("the build finished before the interrupt landed")  # too fast to interrupt
    assert proc.returncode == 130, err
    assert "resume" in err and 7 <= len(partial) < 11 and "probe" not in partial
    resumed = build(url, manifest, out, "--json")
    assert resumed.returncode == 0, resumed.stderr
    statuses = {k: v["status"] for k, v in json.loads(resumed.stdout)["kernels"].items()}
    assert all(statuses[name] == "up to date" for name in partial)
    assert len(json.loads(lock_path.read_text())["kernels"]) == 11
    assert not list(out.glob(".*"))  # no half-written downloads left behind


def test_jobs_commands(farm_server, tmp_path):
    url, log = farm_server

    def cli(*args):
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "jobs", *args, "--server", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done

    params = json.dumps({"channels": 8, "spatial": 3})
    sub = cli(
        "submit",
        "identity",
        "--params",
        params,
        "--format",
        "mlmodelc",
        "--name",
        "probe8",
        "--wait",
        "--json",
    )
    assert sub.returncode == 0, sub.stderr
    job = json.loads(sub.stdout)
    assert job["state"] == "succeeded"
    status = cli("status", job["id"], "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["id"] == job["id"]
    listed = cli("list", "--state", "succeeded", "--json")
    assert job["id"] in [j["id"] for j in json.loads(listed.stdout)]
    out = tmp_path / "probe.zip"
    assert cli("download", job["id"], "-o", str(out)).returncode == 0
    names = zipfile.ZipFile(out).namelist()
    assert any(n.startswith("probe8.mlmodelc/") for n in names) and "kernel.json" in names
    assert "probe8" in log.read_text()  # the stand-in compiler really ran for it
    missing = cli("status", "0" * 64)
    assert missing.returncode == 2 and "404" in missing.stderr
    failing = cli("submit", "identity", "--params", '{"channels": 0, "spatial": 1}')
    assert failing.returncode == 2 and "channels" in failing.stderr


BAD_ENTRIES = [
    (
        'op = "identity"\nparams = { channels = 4, spatial = 1 }\n'
        'quantize = { mode = "palettize", nbits = 4 }',
        r"kernels\.bad\.quantize: identity has no",
    ),
    (
        'op = "conv"\nparams = { in_channels = 0, out_channels = 4, spatial = 1 }',
        r"kernels\.bad\.params\.in_channels: ",
    ),
    (
        'op = "conv"\nparams = { in_channels = 32, out_channels = 32, spatial = 1 }\n'
        'target = "ios17"\nquantize = { mode = "linear", dtype = "int4" }',
        r"kernels\.bad\.quantize\.dtype: int4 needs ios18",
    ),
    ('graph = "bad_graph.json"', r"kernels\.bad\.graph\.nodes\[1\]\.inputs\.x: "),
    (
        'op = "conv"\nparams = { in_channels = 4, out_channels = 4, spatial = 1 }\n'
        'format = "aimodel"\narchitectures = ["m4", "h16"]',
        r"kernels\.bad\.architectures\[1\]: 'h16' is not a chip",
    ),
    (
        'op = "conv"\nparams = { in_channels = 4, out_channels = 4, spatial = 1 }\n'
        'architectures = ["m4"]',
        r"kernels\.bad\.architectures: a device compile starts from",
    ),
]


@pytest.mark.parametrize(("entry", "message"), BAD_ENTRIES)
def test_a_bad_entry_is_refused_at_load_naming_its_field(tmp_path, entry, message):
    """Each kernel is checked as the service would check its request, before any weight is
    hashed or uploaded: a bad entry fails the whole manifest, naming the field."""
    from app.farm.manifest import ManifestError, load_manifest
    from app.graphs.examples import swiglu_ffn

    manifest = _write_project(tmp_path)
    assert len(load_manifest(manifest)) == MANIFEST.count("[kernels.")
    graph = swiglu_ffn(8, 16, 4)
    graph["nodes"][1]["inputs"]["x"] = "nowhere"
    (tmp_path / "bad_graph.json").write_text(json.dumps(graph))
    manifest.write_text(MANIFEST + f"\n[kernels.bad]\n{entry}\n")
    with pytest.raises(ManifestError, match=message):
        load_manifest(manifest)


MODEL_MANIFEST = """
[kernels.qwen3]
model = "Qwen3-tiny"
format = "mil"
context = 16
prefill = 4
kv = "state"
"""


def test_a_model_entry_builds_the_clis_kit_and_reruns_up_to_date(farm_server, tmp_path):
    """`model = "dir"`: the checkpoint folder's files uploaded, the kit built by the service
    (POST /v1/models), equal to `ane-kernels model`'s; a rerun uploads and builds nothing."""
    from kit_support import KIT_QWEN3, write_model

    from app.cli import main

    url, _ = farm_server
    write_model(tmp_path / "Qwen3-tiny", KIT_QWEN3, seed=9)
    manifest = tmp_path / "models.toml"
    manifest.write_text(MODEL_MANIFEST)
    out = tmp_path / "out"
    first = build(url, manifest, out, "--json")
    assert first.returncode == 0, first.stderr + first.stdout
    entry = json.loads((tmp_path / "ane-kernels.lock").read_text())["kernels"]["qwen3"]
    assert entry["file"] == "qwen3.kit.zip" and entry["options"]["kv"] == "state"
    assert {"config.json", "model.safetensors"} <= set(entry["model"])
    assert all(d.startswith("sha256:") for d in entry["model"].values())
    assert entry["toolchain"]["format"] == "mil"
    cli = tmp_path / "cli.kit.zip"
    assert (
        main(
            [
                "model",
                str(tmp_path / "Qwen3-tiny"),
                "-o",
                str(cli),
                "--format",
                "mil",
                "--context",
                "16",
                "--prefill",
                "4",
                "--kv",
                "state",
            ]
        )
        == 0
    )
    assert (out / "qwen3.kit.zip").read_bytes() == cli.read_bytes()
    again = build(url, manifest, out, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["kernels"]["qwen3"]["status"] == (
        "up to date"
    )
    manifest.write_text(MODEL_MANIFEST + 'device = "m99"\n')
    from app.farm.manifest import ManifestError, load_manifest

    with pytest.raises(ManifestError, match=r"kernels\.qwen3\.device: 'm99' is not a known device"):
        load_manifest(manifest)
