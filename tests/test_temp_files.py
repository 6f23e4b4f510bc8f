"""Half-written files do not outlive their writers: a live server whose build workers are writing
large zips is stopped with SIGTERM to its whole process group (each worker removes its temp file
before it dies), or killed with SIGKILL (then the next start-up removes what the dead workers
left, knowing them from the names). A temp file of another host, or of a process still running,
is never touched: the data volume may be shared."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from hostile_support import server_pid
from http_support import npy_bytes
from jobs_support import WorkerProcess, redis_server, worker_env

from app.cache.store import STALE_AFTER_S, StoreLocation
from app.core.files import atomic_file, temp_beside
from app.core.tempnames import HOST, me, owner_of, start_time, temp_name
from app.mlmodelc.atomic import building

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

# A 4096 x 4096 conv: 32 MiB of fp16 in each zip, long enough to be caught in the writing.
SIDE = 4096


def tmp_dirs(data_dir: Path) -> list[Path]:
    return [data_dir / "artifacts" / "tmp", data_dir / "blobs" / "tmp"]


def parts(data_dir: Path) -> list[Path]:
    return sorted(p for d in tmp_dirs(data_dir) if d.is_dir() for p in d.iterdir())


def group_alive(pgid: int) -> list[int]:
    """The processes of group `pgid` still running (zombies waiting to be reaped are not)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        state, _ppid, group = stat[stat.rindex(b")") + 2 :].split()[:3]
        if int(group) == pgid and state != b"Z":
            alive.append(int(entry.name))
    return alive


def wait_until(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)
    return found


def writing(tmp_dir: Path, pid: int | None = None) -> list[Path]:
    """The zips being written in `tmp_dir` (by `pid`, if given): `.part` files past 1 MiB."""
    growing = []
    for path in tmp_dir.glob("*.part"):
        try:
            big = path.stat().st_size > 1 << 20
        except FileNotFoundError:  # published or removed just now
            continue
        if big and (pid is None or owner_of(path.name).pid == pid):
            growing.append(path)
    return growing


def conv(name: str, digest: str) -> dict:
    return {
        "in_channels": SIDE,
        "out_channels": SIDE,
        "spatial": 1,
        "name": name,
        "weights": {"weight": digest},
        "format": "mil",
    }


def large_weight(client: httpx.Client) -> str:
    weight = np.random.default_rng(0).standard_normal((SIDE, SIDE), np.float32)
    return client.post("/v1/blobs", content=npy_bytes(weight)).json()["digest"]


@contextmanager
def server_writing_zips(data_dir: Path) -> Iterator[tuple[int, list[Path], list]]:
    """A server leading its own process group, its two build workers writing large zips: yields
    the group, the temp files being written and the answers the requests got. Two clients ask
    for one new zip after another until one is caught in the writing (a zip is written in tens
    of milliseconds), and stop when the server goes."""
    with uvicorn_server(data_dir, own_group=True, workers="2") as url:
        pgid = server_pid(int(url.rsplit(":", 1)[1]))
        with httpx.Client(base_url=url, timeout=120) as client:
            digest = large_weight(client)
        answers: list = []
        caught = threading.Event()

        def build(who: int) -> None:
            for n in range(1000):
                if caught.is_set():
                    return
                try:
                    answer = httpx.post(
                        f"{url}/v1/kernels/conv", json=conv(f"k{who}_{n}", digest), timeout=120
                    )
                except httpx.TransportError as exc:  # the server went before answering
                    answers.append(exc)
                    return
                answers.append(answer)

        threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        try:
            found = wait_until(lambda: writing(data_dir / "artifacts" / "tmp"), "a zip written")
            caught.set()
            yield pgid, found, answers
        finally:
            caught.set()
            for thread in threads:
                thread.join(timeout=120)


def test_sigterm_to_the_process_group_leaves_no_half_written_zip(tmp_path):
    data_dir = tmp_path / "data"
    with server_writing_zips(data_dir) as (pgid, being_written, answers):
        writers = {owner_of(p.name).pid for p in being_written}
        assert pgid not in writers  # the build workers write, not the server
        os.killpg(pgid, signal.SIGTERM)
        wait_until(lambda: not group_alive(pgid), "the process group to end")
        # Nothing at all, before any restart could sweep: the workers removed their own.
        assert not parts(data_dir), parts(data_dir)
    for answer in answers:  # a build cut short is a 503 to retry, never a 500
        assert isinstance(answer, httpx.TransportError) or answer.status_code in (200, 503)


def test_a_farm_worker_stopped_mid_write_removes_its_temp_files(tmp_path):
    """`ane-kernels worker` builds in a thread that cannot be cancelled: on SIGTERM its job goes
    back to the queue and the zip it was writing is removed, not finished for nobody. At its
    start it removes the compile scratch of this host's ended workers, and no other."""
    data_dir = tmp_path / "data"
    artifacts_tmp = tmp_path / "data" / "artifacts" / "tmp"
    # Compile scratch of a killed worker of this host, and of another host's worker.
    ended = data_dir / "work" / f"{HOST}~{_dead_pid()}~{me().start}~00ab"
    elsewhere = data_dir / "work" / "other-host~1~2~00ab"
    for scratch in (ended, elsewhere):
        (scratch / "out").mkdir(parents=True)
        (scratch / "out" / "model.mil").write_text("half")
    with redis_server(tmp_path) as url:
        env = worker_env(url, data_dir, tmp_path / "xcrun.log")
        worker = WorkerProcess("ane-linux", env, tmp_path / "worker.log")
        try:
            worker.wait_ready(url)
            assert not ended.exists() and elsewhere.exists()
            with (
                uvicorn_server(data_dir, redis_url=url) as api,
                httpx.Client(base_url=api, timeout=120) as client,
            ):
                digest = large_weight(client)
                jobs: list[str] = []
                asked = [0.0]

                def caught() -> list[Path]:  # one new job after another, until one is caught
                    found = writing(artifacts_tmp, worker.pid)
                    if not found and time.monotonic() - asked[0] > 0.05:
                        asked[0] = time.monotonic()
                        if not jobs or client.get(f"/v1/jobs/{jobs[-1]}").json()["state"] in (
                            "succeeded",
                            "failed",
                        ):
                            body = {"op": "conv", **conv(f"j{len(jobs)}", digest)}
                            jobs.append(client.post("/v1/jobs", json=body).json()["id"])
                    return found

                wait_until(caught, "the farm worker writing a zip")
                worker.proc.send_signal(signal.SIGTERM)
                worker.proc.wait(timeout=60)
                assert not parts(data_dir), parts(data_dir)
                states = [client.get(f"/v1/jobs/{job}").json()["state"] for job in jobs]
                assert "failed" not in states and states[-1] != "succeeded", states
                # Nothing finished for nobody: a zip only for each job recorded as done.
                zips = list((data_dir / "artifacts").glob("??/*.zip"))
                assert len(zips) == states.count("succeeded"), (zips, states)
        finally:
            worker.stop()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    assert start_time(child.pid) is None
    return child.pid


def test_start_up_removes_the_files_of_this_hosts_dead_writers_only(tmp_path):
    data_dir = tmp_path / "data"
    with server_writing_zips(data_dir) as (pgid, being_written, _):
        os.killpg(pgid, signal.SIGKILL)  # no handler runs: the half-written zips stay
        wait_until(lambda: not group_alive(pgid), "the process group to end")
        left = [p for p in being_written if p.exists()]
        assert left, "SIGKILL left no temp file: nothing to sweep"
    artifacts_tmp, blobs_tmp = tmp_dirs(data_dir)
    mine = me()
    dead = _dead_pid()
    planted = {
        # Left alone: another host's writer cannot be asked from here.
        "other host": artifacts_tmp / f"other-host~{mine.pid}~1~00ab.part",
        "live writer": artifacts_tmp / temp_name(".part"),
        "live spool": blobs_tmp / temp_name(".part"),
        "unnamed, fresh": artifacts_tmp / "0123456789abcdef.part",
        # Removed: this host's writers that ended.
        "dead pid": blobs_tmp / f"{HOST}~{dead}~{mine.start}~00cd.part",
        "pid reused": artifacts_tmp / f"{HOST}~{mine.pid}~{mine.start + 1}~00ef.meta",
        "unnamed, an hour old": artifacts_tmp / "fedcba9876543210.part",
    }
    for path in planted.values():
        path.write_bytes(b"half")
    old = time.time() - STALE_AFTER_S - 60
    os.utime(planted["unnamed, an hour old"], (old, old))
    with uvicorn_server(data_dir) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert not [p for p in left if p.exists()]
        kept = {what for what, path in planted.items() if path.exists()}
        assert kept == {"other host", "live writer", "live spool", "unnamed, fresh"}


def test_every_temp_name_says_its_writer(tmp_path):
    """The store's temps, a sidecar's, `atomic_file`'s (after a stem that may hold the separator
    and dots) and a staging directory's all parse back to this process."""
    names = [
        StoreLocation(tmp_path, ".zip").temp_path().name,
        temp_name(".meta"),
        temp_beside(tmp_path / "a~b.weight.bin").name,
    ]
    seen = []
    with atomic_file(tmp_path / "out.zip") as f:
        seen += [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.zip~")]
        f.write(b"whole")
    with building(tmp_path / "k.mlmodelc") as staging:
        seen.append(staging.name)
    assert len(seen) == 2 and (tmp_path / "out.zip").read_bytes() == b"whole"
    for name in names + seen:
        assert owner_of(name) == me(), name
    assert owner_of("0123456789abcdef.part") is None
    assert owner_of("stale.part") is None
