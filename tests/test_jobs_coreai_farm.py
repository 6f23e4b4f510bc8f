"""Core AI's device compile on the farm: a `format: "aimodel"` request with `architectures`
(chips of the device table) is a job for the macOS queue, whose worker runs `xcrun coreai-build
compile` once per architecture and returns the `.aimodelc` set in the job's zip.

Real parts: a private redis-server, a real `ane-kernels worker --queue ane-macos` process and a
real uvicorn API on the farm; the compiler is the labelled stand-in xcrun (tests/fake_xcrun),
told to write a GPU-only bundle for a18, as coreai-build does with exit 0 when the Neural Engine
compile fails (apple/coreai-models #205)."""

import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
import zipfile

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from http_support import assert_problem
from jobs_support import FAKE_XCRUN, REPO, WorkerProcess, redis_server, worker_env, xcrun_events

from app.client import Client, flows
from app.devices import COREAI_ARCHITECTURES
from app.errors import RequestError
from app.farm.lock import read_lock
from app.farm.manifest import load_manifest
from app.jobs.engine import queue_for
from app.request import KernelRequest

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

CONV = {"op": "conv", "in_channels": 4, "out_channels": 4, "spatial": 2}
PARAMS = {k: v for k, v in CONV.items() if k != "op"}
W = [[0.5 if i == j else 0.0 for j in range(4)] for i in range(4)]

needs_coreai = pytest.mark.skipif(
    importlib.util.find_spec("coreai") is None, reason="needs the coreai extra (coreai-core)"
)


def body(name, architectures, **extra):
    return {
        **CONV,
        "format": "aimodel",
        "name": name,
        "weights": {"weight": W},
        "architectures": architectures,
        **extra,
    }


# -- the request option -------------------------------------------------------------------------
def test_architectures_are_checked_against_the_device_table():
    with pytest.raises(RequestError) as caught:
        KernelRequest.create("conv", PARAMS, format="aimodel", architectures=["m4", "M4"])
    assert caught.value.field == "architectures[1]"
    assert (
        "'M4'" in caught.value.message and ", ".join(COREAI_ARCHITECTURES) in caught.value.message
    )
    with pytest.raises(RequestError) as caught:  # a15 is in the table, but has no AOT compile
        KernelRequest.create("conv", PARAMS, format="aimodel", architectures=["a15"])
    assert caught.value.field == "architectures[0]"
    with pytest.raises(RequestError) as caught:
        KernelRequest.create("conv", PARAMS, format="mlpackage", architectures=["m4"])
    assert caught.value.field == "architectures" and '"aimodel"' in caught.value.message


def test_architectures_enter_the_key_and_route_to_the_macos_queue_only_when_set():
    plain = KernelRequest.create("conv", PARAMS, format="aimodel")
    assert "architectures" not in plain._key_doc and queue_for(plain) == "ane-linux"
    assert not plain.compiled and plain.filename == "conv.aimodel.zip"
    chips = KernelRequest.create("conv", PARAMS, format="aimodel", architectures=["m4", "a18-pro"])
    assert chips._key_doc["architectures"] == ["m4", "a18-pro"] and chips.key != plain.key
    assert queue_for(chips) == "ane-macos" and chips.compiled
    assert chips.filename == "conv.aimodelc.zip"
    again = KernelRequest.from_json(chips.to_json())  # what a job record stores
    assert again.architectures == ("m4", "a18-pro") and again.key == chips.key
    assert KernelRequest.from_json(plain.to_json()).key == plain.key


def test_a_lost_job_is_submitted_again_with_its_architectures():
    """The client resubmits a job the service lost from the request its record shows."""
    chips = KernelRequest.create("conv", PARAMS, format="aimodel", architectures=["m4"])
    assert flows.body_of(chips.to_json(values=False))["architectures"] == ["m4"]


# -- the farm -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """A macOS worker with the stand-in xcrun (GPU-only bundles for a18) and an API on the same
    broker and data directory; the API itself has no xcrun."""
    root = tmp_path_factory.mktemp("coreai-farm")
    data_dir, log = root / "data", root / "xcrun.log"
    with redis_server(root) as url:
        env = worker_env(url, data_dir, log, FAKE_COREAI_GPU_ONLY="a18", ANE_JOB_KEEP_S="600")
        worker = WorkerProcess("ane-macos", env, root / "worker.log")
        try:
            worker.wait_ready(url)
            with (
                uvicorn_server(data_dir, redis_url=url, sync_wait_s="60") as api,
                httpx.Client(base_url=api, timeout=90) as client,
            ):
                yield client, log
        finally:
            worker.stop()


def wait_done(client, job_id):
    with Client(str(client.base_url)) as c:
        job = c.job(job_id)
        job.wait(timeout=90)
        return job.data


@needs_coreai
def test_a_job_compiles_each_architecture_on_the_macos_worker(farm):
    client, log = farm
    submitted = client.post("/v1/jobs", json=body("devices", ["m4", "a17-pro"]))
    assert submitted.status_code in (200, 201, 202), submitted.text
    assert submitted.json()["queue"] == "ane-macos"
    job = wait_done(client, submitted.json()["id"])
    assert job["state"] == "succeeded", job
    assert job["request"]["architectures"] == ["m4", "a17-pro"]
    assert job["artifact"]["filename"] == "devices.aimodelc.zip"
    assert job["toolchain"]["coreai_build"].endswith("(STAND-IN for Apple's coreai-build)")
    art = client.get(f"/v1/jobs/{job['id']}/artifact")
    with zipfile.ZipFile(io.BytesIO(art.content)) as zf:
        names = set(zf.namelist())
        kernel = json.loads(zf.read("kernel.json"))
    assert {
        "m4/devices.aimodelc/main.mlirb",
        "a17-pro/devices.aimodelc/main.mlirb",
        "m4/devices.aimodelc/devices_ANE_region_0.bc.mlir",
        "devices.aimodel/main.mlirb",
        "compile.log",
    } <= names
    assert set(kernel["aimodelc"]["architectures"]) == {"m4", "a17-pro"}
    assert kernel["format"] == "aimodel"
    argvs = [e["argv"] for e in xcrun_events(log, "devices", "start")]
    assert argvs == [
        [
            "coreai-build",
            "compile",
            "src/devices.aimodel",
            "--architecture",
            arch,
            "--output",
            f"out/{arch}",
        ]
        for arch in ("m4", "a17-pro")
    ]


@needs_coreai
def test_a_gpu_only_bundle_fails_the_job_naming_the_architecture(farm):
    client, _ = farm
    submitted = client.post("/v1/jobs", json=body("gpuonly", ["m4", "a18"])).json()
    job = wait_done(client, submitted["id"])
    assert job["state"] == "failed", job
    assert job["error"]["kind"] == "compiler"
    assert "for a18 with no Neural Engine region" in job["error"]["message"]
    assert "#205" in job["error"]["message"]
    assert job.get("artifact") is None and job["attempts"] == 1  # refused, not retried
    assert client.get(f"/v1/jobs/{job['id']}/artifact").status_code >= 400
    # The synchronous path routes the same request to the same job, and answers its failure.
    sync = client.post("/v1/kernels", json=body("gpuonly", ["m4", "a18"]))
    body_ = assert_problem(sync, 422)
    assert "a18" in body_["detail"] and body_["job"] == job["id"]


@needs_coreai
def test_the_synchronous_path_and_the_client_route_it_as_a_job(farm):
    client, _ = farm
    sync = client.post("/v1/kernels", json=body("viasync", ["m5"]))
    assert sync.status_code == 200, sync.text
    with zipfile.ZipFile(io.BytesIO(sync.content)) as zf:
        assert "m5/viasync.aimodelc/main.mlirb" in zf.namelist()
    with Client(str(client.base_url)) as c:
        job = c.submit(
            "conv",
            PARAMS,
            {"weight": W},
            format="aimodel",
            name="viaclient",
            architectures=["a19-pro"],
        )
        job.wait(timeout=90)
        assert job.state == "succeeded", job.data
        assert job.data["queue"] == "ane-macos"
        assert job.data["request"]["architectures"] == ["a19-pro"]


def test_bad_architectures_are_refused_over_http_naming_the_field(farm):
    client, _ = farm
    for path in ("/v1/jobs", "/v1/kernels"):
        problem = assert_problem(
            client.post(path, json=body("bad", ["m4", "h16"])), 422, "architectures[1]"
        )
        assert "a18-pro" in problem["detail"]  # the known ones are listed
        assert_problem(
            client.post(path, json={**body("bad", ["m4"]), "format": "mlpackage"}),
            422,
            "architectures",
        )
        assert_problem(client.post(path, json=body("bad", [])), 422, "architectures")


def test_without_a_farm_a_device_compile_is_unavailable_naming_the_option(client):
    """The shared test server: embedded jobs, no xcrun on its PATH."""
    problem = assert_problem(
        client.post("/v1/kernels", json=body("nofarm", ["m4"])), 503, "architectures"
    )
    assert "ane-macos" in problem["detail"] and "ANE_REDIS_URL" in problem["detail"]


def _page_device_compile() -> tuple[str, str]:
    """docs/mlmodelc-and-coreai.md's device compile examples: the `ane-kernels compile` command
    (its continuation lines joined) and the Python snippet."""
    page = (REPO / "docs" / "mlmodelc-and-coreai.md").read_text(encoding="utf-8")
    part = page.split("## Device compile on the farm")[1].split("\n## ")[0]
    commands = part.split("```sh\n")[1].split("```")[0].replace("\\\n", " ").splitlines()
    command = next(line for line in commands if "ane-kernels compile" in line)
    return command, part.split("```python\n")[1].split("```")[0]


@needs_coreai
def test_the_pages_client_example_runs_on_the_farm(farm, tmp_path, monkeypatch):
    """The page's client example, which the docs tests do not run (it needs a farm)."""
    client, _ = farm
    _, code = _page_device_compile()
    assert "http://localhost:8000" in code
    monkeypatch.chdir(tmp_path)
    exec(code.replace("http://localhost:8000", str(client.base_url)), {})
    with zipfile.ZipFile(tmp_path / "conv.aimodelc.zip") as zf:
        assert {"m4/conv.aimodelc/main.mlirb", "a18-pro/conv.aimodelc/main.mlirb"} <= set(
            zf.namelist()
        )


MANIFEST = """
[defaults]
format = "aimodel"
architectures = ["m4"]

[kernels.proj]
op = "conv"
params = { in_channels = 4, out_channels = 4, spatial = 2 }
weights = { weight = "w.npy" }

[kernels.proj_phones]
op = "conv"
params = { in_channels = 4, out_channels = 4, spatial = 2 }
weights = { weight = "w.npy" }
architectures = ["a18-pro", "a19-pro"]
"""
ASSET = """
[kernels.proj_asset]
op = "conv"
params = { in_channels = 4, out_channels = 4, spatial = 2 }
weights = { weight = "w.npy" }
format = "mlpackage"
"""


@needs_coreai
def test_a_manifest_builds_device_compiles_on_the_farm(farm, tmp_path):
    """`ane-kernels build`: [defaults] architectures apply to the aimodel kernels (only), an
    entry's own replace them, and the lock records them."""
    client, _ = farm
    np.save(tmp_path / "w.npy", np.asarray(W, dtype=np.float32))
    (tmp_path / "kernels.toml").write_text(MANIFEST + ASSET)
    asset = {k.name: k for k in load_manifest(tmp_path / "kernels.toml")}["proj_asset"]
    assert asset.architectures is None and asset.filename == "proj_asset.mlpackage.zip"
    (tmp_path / "kernels.toml").write_text(MANIFEST)  # this farm has no ane-linux worker
    out = tmp_path / "out"
    done = cli(
        "build", str(tmp_path / "kernels.toml"), "--server", str(client.base_url), "--out", str(out)
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert sorted(p.name for p in out.glob("*.zip")) == [
        "proj.aimodelc.zip",
        "proj_phones.aimodelc.zip",
    ]
    with zipfile.ZipFile(out / "proj_phones.aimodelc.zip") as zf:
        bundles = {n.split("/")[0] for n in zf.namelist() if ".aimodelc/" in n}
    assert bundles == {"a18-pro", "a19-pro"}
    lock = read_lock(tmp_path / "ane-kernels.lock")
    assert lock["proj"]["architectures"] == ["m4"]
    assert lock["proj_phones"]["architectures"] == ["a18-pro", "a19-pro"]
    assert "STAND-IN" in lock["proj"]["toolchain"]["coreai_build"]["coreai_build"]


# -- the CLI ------------------------------------------------------------------------------------
def cli(*args, path_first=None):
    env = {**os.environ}
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_coreai
def test_cli_compiles_for_architectures_with_this_machines_coreai_build(tmp_path):
    """The page's command, with the stand-in as this machine's xcrun."""
    command, _ = _page_device_compile()
    args = shlex.split(command, comments=True)[1:]  # after ane-kernels
    out = args.index("-o") + 1
    args[out] = str(tmp_path / args[out])
    done = cli(*args, path_first=FAKE_XCRUN)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(args[out]) as zf:
        assert {"m4/conv.aimodelc/main.mlirb", "a18-pro/conv.aimodelc/main.mlirb"} <= set(
            zf.namelist()
        )
    bad = cli(*args[: out - 1], "-o", str(tmp_path / "bad.zip"), "--architectures", "m4,h16")
    assert bad.returncode == 2 and "architectures[1]" in bad.stderr


@needs_coreai
def test_cli_submits_and_compiles_for_architectures_on_a_server(farm, tmp_path):
    client, _ = farm
    server = ["--server", str(client.base_url)]
    params = ["--params", json.dumps({"channels": 8, "spatial": 3}), "--format", "aimodel"]
    sub = cli(
        "jobs",
        "submit",
        "identity",
        *params,
        "--architectures",
        "m1,m2",
        "--name",
        "cliid",
        "--wait",
        "--json",
        *server,
    )
    assert sub.returncode == 0, sub.stderr
    job = json.loads(sub.stdout)
    assert job["state"] == "succeeded" and job["request"]["architectures"] == ["m1", "m2"]
    out = tmp_path / "remote.aimodelc.zip"
    done = cli(
        "compile",
        "identity",
        *params,
        "--architectures",
        "m3",
        "--name",
        "remote",
        "-o",
        str(out),
        *server,
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out) as zf:
        assert "m3/remote.aimodelc/main.mlirb" in zf.namelist()
    bad = cli("jobs", "submit", "identity", *params, "--architectures", "m3,x1", *server)
    assert bad.returncode == 2 and "architectures[1]" in bad.stderr


@needs_coreai
def test_cli_without_xcrun_points_at_the_farm(tmp_path):
    done = cli(
        "compile",
        "conv",
        "--params",
        json.dumps(PARAMS),
        "--random-weights",
        "0",
        "--format",
        "aimodel",
        "--architectures",
        "m4",
        "-o",
        str(tmp_path / "x.zip"),
    )
    assert done.returncode == 2 and "--server" in done.stderr, done.stderr
    assert not (tmp_path / "x.zip").exists()
