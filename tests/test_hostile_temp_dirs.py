"""The scratch directories a model kit build makes (the weights held for verifying, a compile's
bundle) live in the data directory's temp area, named for their writer: a server stopped with
SIGTERM removes them, one killed with SIGKILL has them removed by its next start-up, and a build
worker that dies mid-build has its own removed when the job is tried again. None is ever left in
$TMPDIR (finding 10: `kit-held-*` and `kit-*` of 66-78 MiB each stayed there)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
from conftest import uvicorn_server
from hostile_support import server_pid
from kit_support import KIT_QWEN3, write_model
from test_temp_files import group_alive, wait_until

from app.client import Client
from app.client.flows import checkpoint_files
from app.core.files import scratch_dir, sweep_system_scratch
from app.core.tempnames import HOST

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

# 8 layers of width 128 verified: a build of a few seconds, long enough to be caught
WIDE = KIT_QWEN3 | {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 8,
    "vocab_size": 1000,
    "max_position_embeddings": 256,
}
OPTIONS = {"format": "mil", "context": 256, "prefill": 64, "verify": True}


def scratch(data_dir: Path, tmpdir: Path) -> list[Path]:
    """Every scratch directory of a kit build: in the data directory, or in $TMPDIR (where they
    used to be `kit-held-*`, `kit-*`, `ane-kit-limits-*`)."""
    found = [p for p in data_dir.rglob("*") if p.is_dir() and p.suffix in (".held", ".compile")]
    return found + [p for p in tmpdir.iterdir() if "kit" in p.name or p.name.startswith("ane")]


def building(url: str, folder: Path) -> str:
    """Upload the checkpoint and ask for its verified kit: the job's id."""
    with Client(url) as client:
        files = {n: client.upload_file(p)["digest"] for n, p in checkpoint_files(folder).items()}
    answer = httpx.post(f"{url}/v1/models", json={"files": files, **OPTIONS}, timeout=60)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def held(data_dir: Path, tmpdir: Path) -> list[Path]:
    """The held-weights directories there are now (in either place)."""
    mine = list((data_dir / "artifacts" / "tmp").glob("*.held"))
    return mine + [p for p in tmpdir.glob("*held*") if p.is_dir()]


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_server_leaves_no_scratch(tmp_path, tmpdir_env, how):
    folder = write_model(tmp_path / "wide", WIDE, seed=1)
    data_dir = tmp_path / "data"
    with uvicorn_server(data_dir, own_group=True) as url:
        pgid = server_pid(int(url.rsplit(":", 1)[1]))
        building(url, folder)
        found = wait_until(lambda: held(data_dir, tmpdir_env), "a build holding weights")
        assert all(p.parent == data_dir / "artifacts" / "tmp" for p in found), found
        os.killpg(pgid, how)
        wait_until(lambda: not group_alive(pgid), "the process group to end")
        if how == signal.SIGTERM:  # each worker removed its own before it died
            assert not scratch(data_dir, tmpdir_env), scratch(data_dir, tmpdir_env)
    if how == signal.SIGKILL:
        assert held(data_dir, tmpdir_env), "SIGKILL left nothing: nothing to sweep"
        with uvicorn_server(data_dir):  # the next start-up sweeps what the dead left
            assert not scratch(data_dir, tmpdir_env), scratch(data_dir, tmpdir_env)


def test_a_dead_build_workers_scratch_goes_when_its_job_is_retried(tmp_path, tmpdir_env):
    folder = write_model(tmp_path / "wide", WIDE, seed=2)
    data_dir = tmp_path / "data"
    with uvicorn_server(data_dir, job_retry_backoff_s="0.1") as url:
        job = building(url, folder)
        found = wait_until(lambda: held(data_dir, tmpdir_env), "a build holding weights")
        assert found[0].parent == data_dir / "artifacts" / "tmp", found
        writer = int(found[0].name.split("~")[1])
        os.kill(writer, signal.SIGKILL)  # the build worker, not the server
        with Client(url, poll_interval=0.2) as client:
            done = client.job(job).wait(timeout=300).data
        assert done["state"] == "succeeded" and done["attempts"] >= 2, done
        left = [p for p in scratch(data_dir, tmpdir_env) if f"~{writer}~" in p.name]
        assert not left, left
        assert not scratch(data_dir, tmpdir_env)


def test_scratch_in_the_system_temp_dir_is_swept_by_owner(tmp_path):
    """The command line's scratch goes to the system's temp directory, named for its writer: a
    later build sweeps what this host's ended processes left there, and nothing else."""
    from test_temp_files import _dead_pid

    dead = tmp_path / f"ane~{HOST}~{_dead_pid()}~1~00ab.held"
    elsewhere = tmp_path / "ane~other-host~1~2~00ab.held"
    foreign = tmp_path / "someone-elses"
    for path in (dead, elsewhere, foreign):
        (path / "x").mkdir(parents=True)
    assert sweep_system_scratch(tmp_path) == 1
    assert not dead.exists() and elsewhere.exists() and foreign.exists()
    with scratch_dir(".held", tmp_path) as mine:
        assert mine.is_dir() and mine.parent == tmp_path
    assert not mine.exists()
