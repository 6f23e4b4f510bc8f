"""Graphs from every edge: `ane-kernels compile-graph` (locally and with --server), the Python
client's compile_graph / submit_graph, and a farm manifest's graph entry: the same request gives
the same bytes on every path."""

import json
import subprocess
import sys

import numpy as np
import pytest

from app import artifacts
from app.client import Client
from app.graphs.examples import swiglu_ffn
from app.request import KernelRequest

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

D, H, S = 8, 16, 4
RNG = np.random.default_rng(11)
WEIGHTS = {
    "gate.weight": (RNG.standard_normal((H, D)) * 0.3).astype(np.float32),
    "up.weight": (RNG.standard_normal((H, D)) * 0.3).astype(np.float32),
    "down.weight": (RNG.standard_normal((D, H)) * 0.3).astype(np.float32),
}
GRAPH = swiglu_ffn(D, H, S)


def local(fmt="mil", name="ffn") -> bytes:
    request = KernelRequest.create(graph=GRAPH, weights=WEIGHTS, format=fmt, name=name)
    return artifacts.zip_bytes(artifacts.prepare(request))


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _files(tmp_path):
    graph = tmp_path / "ffn.json"
    graph.write_text(json.dumps({"name": "ffn", **GRAPH}))
    flags = []
    for key, array in WEIGHTS.items():
        np.save(tmp_path / f"{key}.npy", array)
        flags += ["--weights", f"{key}={tmp_path / f'{key}.npy'}"]
    return graph, flags


def test_compile_graph_locally_and_on_a_server_gives_the_same_bytes(server, tmp_path):
    graph, flags = _files(tmp_path)
    done = cli(
        "compile-graph", str(graph), *flags, "--format", "mil", "-o", str(tmp_path / "l.zip")
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "l.zip").read_bytes() == local()
    remote = cli(
        "compile-graph",
        str(graph),
        *flags,
        "--format",
        "mil",
        "--server",
        server.url,
        "-o",
        str(tmp_path / "r.zip"),
    )
    assert remote.returncode == 0, remote.stderr
    assert (tmp_path / "r.zip").read_bytes() == local()


def test_compile_graph_bad_input_exits_2_and_writes_nothing(tmp_path):
    graph, flags = _files(tmp_path)
    broken = json.loads(graph.read_text())
    broken["nodes"][3]["inputs"]["y"] = "nope"
    graph.write_text(json.dumps(broken))
    out = tmp_path / "out.zip"
    done = cli("compile-graph", str(graph), *flags, "-o", str(out))
    assert done.returncode == 2 and "nodes[3].inputs.y" in done.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.zip*"))
    drawn = cli(
        "compile-graph",
        str(tmp_path / "ffn.json"),
        "--random-weights",
        "1",
        "--verify",
        "-o",
        str(out),
    )
    assert drawn.returncode == 2 and "nodes[3].inputs.y" in drawn.stderr


def test_the_client_compiles_and_submits_graphs(server):
    with Client(server.url) as c:
        assert c.compile_graph(GRAPH, WEIGHTS, format="mil", name="ffn") == local()
        job = c.submit_graph(GRAPH, WEIGHTS, format="mil", name="ffn").wait(timeout=60)
        assert job.state == "succeeded"
        with pytest.raises(ValueError, match=r"nope\.weight"):  # refused before any upload
            c.compile_graph(GRAPH, {"nope.weight": WEIGHTS["up.weight"]})


def test_a_farm_manifest_builds_a_graph_entry(server, tmp_path):
    _, _ = _files(tmp_path)
    weights = ", ".join(f'"{k}" = "{k}.npy"' for k in WEIGHTS)
    manifest = tmp_path / "kernels.toml"
    manifest.write_text(f"""[kernels.ffn]
graph = "ffn.json"
weights = {{ {weights} }}
format = "mil"
""")
    done = cli(
        "build", str(manifest), "--server", server.url, "--out", str(tmp_path / "out"), "--json"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert (tmp_path / "out" / "ffn.mil.zip").read_bytes() == local()
    entry = json.loads((tmp_path / "ane-kernels.lock").read_text())["kernels"]["ffn"]
    assert entry["graph"]["nodes"][0]["id"] == "gate" and "op" not in entry
    manifest.write_text(manifest.read_text().replace('"down.weight"', '"downx.weight"'))
    bad = cli("build", str(manifest), "--server", server.url, "--out", str(tmp_path / "out"))
    assert bad.returncode == 2 and "downx.weight" in bad.stderr
