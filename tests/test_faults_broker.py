"""Broker (Redis) outages under a running farm: a real redis-server killed with SIGKILL and
started again (empty, or from its append-only file), a real uvicorn API, a real
`ane-kernels worker` process compiling with the labelled stand-in xcrun, and the real client and
CLI. What must hold: job endpoints answer 503 naming the broker (never 500), /readyz goes
not-ready and back, kernel requests that need no broker are served, /metrics counts the broker
errors, running compiles finish, the worker never exits and takes work again, and jobs the broker
lost are submitted again by the client without a second compile."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import zipfile

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from faults_support import access_log, json_lines, log_path, redis_process
from http_support import assert_problem, metric
from jobs_support import CLI, REPO, WorkerProcess, eventually, free_port, worker_env, xcrun_events

from app.client import Client
from app.jobs.broker import broker_client
from app.jobs.lifecycle import Job, JobState
from app.jobs.outage import BrokerLink, PatientRecords
from app.jobs.records import RedisRecords
from app.request import KernelRequest
from app.settings import Settings

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

PARAMS = {"in_channels": 2, "out_channels": 2, "spatial": 4}
W = [[1.0, 0.0], [0.0, 1.0]]
# Fast reconnects and short client back-offs keep the outages short.
WORKER_FAST = {
    "ANE_BROKER_RETRY_S": "0.2",
    "ANE_BROKER_RETRY_MAX_S": "1",
    "ANE_WORKER_MAX_JOBS": "4",
}
API = {"retry_after_seconds": "1", "sync_wait_s": "0.2"}


def job_body(name: str) -> dict:
    return {"op": "conv", **PARAMS, "format": "mlmodelc", "name": name, "weights": {"weight": W}}


def cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )


def assert_broker_503(response: httpx.Response) -> dict:
    problem = assert_problem(response, 503)
    assert problem["cause"] == "broker" and "broker" in problem["detail"], problem
    assert problem["broker"].startswith("redis://127.0.0.1:")
    assert float(response.headers["retry-after"]) > 0
    return problem


def heartbeat(server, pid: int) -> dict | None:
    client = server.client()
    try:
        for key in client.keys("ane:worker:*"):
            if key.decode().endswith(f":{pid}"):
                raw = client.get(key)
                return json.loads(raw) if raw else None
        return None
    finally:
        client.close()


def test_an_api_whose_broker_is_down_serves_what_needs_no_broker(tmp_path):
    """The API starts with no Redis at its address, and says so without a 500."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    data_dir = tmp_path / "data"
    with (
        uvicorn_server(data_dir, redis_url=dead, **API) as url,
        httpx.Client(base_url=url, timeout=30) as c,
    ):
        assert c.get("/healthz").status_code == 200
        ready = assert_problem(c.get("/readyz"), 503)
        assert "storage" not in ready["checks"]
        assert ready["checks"]["broker"].startswith(
            f"the job broker (Redis at {dead}) is unreachable"
        )
        for answer in (
            c.post("/v1/jobs", json=job_body("k")),
            c.get("/v1/jobs"),
            c.get("/v1/jobs/abc"),
            c.delete("/v1/jobs/abc"),
            c.get("/v1/batches/abc"),
            c.get("/v1/workers"),
        ):
            assert_broker_503(answer)
        served = c.post("/v1/kernels", json={**job_body("k"), "format": "mil"})
        assert served.status_code == 200 and served.headers["x-cache"] == "miss"
        assert "mlmodelc" not in c.get("/v1/info").json()["formats"]
        assert metric(c, "ane_broker_errors_total") >= 6
    statuses = {d["status"] for d in access_log(log_path(data_dir, url))}
    assert 500 not in statuses and 503 in statuses


def test_worker_check_names_an_unreachable_broker():
    dead = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [*CLI, "worker", "--queue", "ane-linux", "--check", "--redis-url", dead],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert f"the broker {dead} is unreachable" in done.stderr


@pytest.mark.slow
def test_redis_killed_mid_compile_and_started_again_empty(tmp_path):
    data_dir, xcrun_log = tmp_path / "data", tmp_path / "xcrun.log"
    env = worker_env(
        "", data_dir, xcrun_log, FAKE_XCRUN_SLEEP="slow=3,waited=3,built=3", **WORKER_FAST
    )
    manifest = tmp_path / "kernels.toml"
    np.save(tmp_path / "w.npy", np.eye(2, dtype=np.float32))
    manifest.write_text(
        '[kernels.built]\nop = "conv"\nformat = "mlmodelc"\n'
        "params = { in_channels = 2, out_channels = 2, spatial = 4 }\n"
        'weights = { weight = "w.npy" }\n'
    )
    with redis_process(tmp_path, persistent=False) as server:
        server.start()
        env["ANE_REDIS_URL"] = server.url
        worker = WorkerProcess("ane-linux", env, tmp_path / "worker.log")
        try:
            worker.wait_ready(server.url)
            with (
                uvicorn_server(data_dir, redis_url=server.url, **API) as url,
                httpx.Client(base_url=url, timeout=30) as c,
                Client(url, max_retry_wait=120, poll_interval=0.2) as sdk,
            ):
                # Three clients with a job each: the SDK, `jobs wait` (a job posted as JSON
                # with inline weights) and `build`.
                job = sdk.submit(
                    "conv",
                    PARAMS,
                    {"weight": np.eye(2, dtype=np.float32)},
                    format="mlmodelc",
                    name="slow",
                )
                waited = c.post("/v1/jobs", json=job_body("waited")).json()
                cli_env = {**os.environ, "ANE_SERVER": url}
                waiting = cli("jobs", "wait", waited["id"], "--json", env=cli_env)
                building = cli(
                    "build", str(manifest), "--out", str(tmp_path / "out"), "--json", env=cli_env
                )
                eventually(
                    lambda: len(xcrun_events(xcrun_log, event="start")) == 3,
                    60,
                    "three compiles running",
                )
                # `jobs wait` can submit again only a job it has seen: let it fetch it once.
                followed = f"/v1/jobs/{waited['id']}"
                eventually(
                    lambda: any(
                        d["path"] == followed and d["status"] == 200
                        for d in access_log(log_path(data_dir, url))
                    ),
                    60,
                    "`jobs wait` following its job",
                )

                server.kill()
                assert_broker_503(c.post("/v1/jobs", json=job_body("during")))
                assert_broker_503(c.get(f"/v1/jobs/{job.id}"))
                assert_broker_503(c.get("/v1/workers"))
                assert_broker_503(c.get("/v1/jobs"))
                assert_broker_503(c.get("/v1/batches/" + "0" * 64))
                assert_broker_503(c.post("/v1/kernels", json=job_body("sync")))
                assert assert_problem(c.get("/readyz"), 503)["checks"]["broker"]
                mil = c.post("/v1/kernels", json={**job_body("sync"), "format": "mil"})
                assert mil.status_code == 200
                assert metric(c, "ane_broker_errors_total") >= 6
                # The running compiles finish while the broker is away; the worker stays.
                eventually(
                    lambda: len(xcrun_events(xcrun_log, event="done")) == 3,
                    30,
                    "the compiles to finish",
                )
                time.sleep(1)  # a few reconnect attempts
                assert worker.proc.poll() is None

                server.start()  # empty: every record and queue entry is gone
                eventually(lambda: c.get("/readyz").status_code == 200, 30, "ready again")
                beat = eventually(lambda: heartbeat(server, worker.pid), 30, "the heartbeat")
                assert beat["broker"]["reachable"] and beat["broker"]["outages"] >= 1
                assert beat["broker"]["last_outage"]["seconds"] > 0
                assert_problem(c.get(f"/v1/jobs/{job.id}"), 404)  # the broker lost it

                done = job.wait(timeout=60)  # submitted again: the artifact is in the store
                assert done.state == "succeeded", done.data
                assert "generating" not in done.data["stages"]  # finished at once
                zip_path = tmp_path / "slow.zip"
                done.download(zip_path)
                with zipfile.ZipFile(zip_path) as zf:
                    assert "slow.mlmodelc/model.mil" in zf.namelist()
                out, err = waiting.communicate(timeout=120)
                assert waiting.returncode == 0, err
                assert json.loads(out)["state"] == "succeeded"
                out, err = building.communicate(timeout=120)
                assert building.returncode == 0, err
                assert json.loads(out)["kernels"]["built"]["status"] == "built"
                assert (tmp_path / "out" / "built.mlmodelc.zip").is_file()

                # New work after the outage: the same worker takes it, no restart.
                after = c.post("/v1/jobs", json=job_body("after")).json()
                finished = eventually(
                    lambda: (
                        (j := c.get(f"/v1/jobs/{after['id']}").json())["state"] == "succeeded" and j
                    ),
                    60,
                    "a job submitted after the outage",
                )
                assert finished["worker"].endswith(f":{worker.pid}")
            for model in ("slow", "waited", "built", "after"):  # one compile each, no rerun
                assert len(xcrun_events(xcrun_log, model, "start")) == 1, model
            assert worker.proc.poll() is None  # never exited on its own
        finally:
            worker.stop()
    assert worker.proc.returncode == 0
    statuses = [d["status"] for d in access_log(log_path(data_dir, url))]
    assert 500 not in statuses and 503 in statuses
    messages = [d["msg"] for d in json_lines(worker.log_path)]
    assert "broker unreachable; reconnecting with backoff" in messages
    assert "broker reachable again" in messages


@pytest.mark.slow
def test_redis_with_its_append_only_file_comes_back_with_the_job(tmp_path):
    data_dir, xcrun_log = tmp_path / "data", tmp_path / "xcrun.log"
    env = worker_env("", data_dir, xcrun_log, FAKE_XCRUN_SLEEP="kept=3", **WORKER_FAST)
    with redis_process(tmp_path, persistent=True) as server:
        server.start()
        env["ANE_REDIS_URL"] = server.url
        worker = WorkerProcess("ane-linux", env, tmp_path / "worker.log")
        late = None
        try:
            worker.wait_ready(server.url)
            with (
                uvicorn_server(data_dir, redis_url=server.url, **API) as url,
                httpx.Client(base_url=url, timeout=30) as c,
            ):
                job = c.post("/v1/jobs", json=job_body("kept")).json()
                eventually(lambda: xcrun_events(xcrun_log, "kept", "start"), 60, "the compile")
                server.kill()
                assert_broker_503(c.get(f"/v1/jobs/{job['id']}"))
                eventually(lambda: xcrun_events(xcrun_log, "kept", "done"), 30, "the compile")
                time.sleep(1)
                assert worker.proc.poll() is None

                server.start()  # from its append-only file: the record is back
                done = eventually(
                    lambda: (
                        (j := c.get(f"/v1/jobs/{job['id']}").json())["state"] == "succeeded" and j
                    ),
                    30,
                    "the job's result recorded after the outage",
                )
                assert done["attempts"] == 1 and done["worker"].endswith(f":{worker.pid}")
                assert len(xcrun_events(xcrun_log, "kept", "start")) == 1
                assert c.get(f"/v1/jobs/{job['id']}/artifact").status_code == 200
                assert c.get("/readyz").status_code == 200

                # Another outage. A worker started during it waits for the broker instead of
                # exiting; one stopped during it (SIGTERM) exits at once and cleanly.
                server.kill()
                late = WorkerProcess("ane-linux", env, tmp_path / "late.log")
                eventually(
                    lambda: (
                        "broker unreachable; reconnecting with backoff" in late.log_path.read_text()
                    ),
                    60,
                    "the late worker to wait",
                )
                worker.proc.send_signal(signal.SIGTERM)
                assert worker.proc.wait(timeout=20) == 0
                time.sleep(1)
                assert late.proc.poll() is None
                # Stuck or waiting, a worker writes its threads' stacks on SIGUSR1 and goes on.
                late.proc.send_signal(signal.SIGUSR1)
                eventually(
                    lambda: "most recent call first" in late.log_path.read_text(),
                    10,
                    "the stacks in the log",
                )
                assert late.proc.poll() is None
                server.start()
                late.wait_ready(server.url)
                again = c.post("/v1/jobs", json=job_body("late")).json()
                finished = eventually(
                    lambda: (
                        (j := c.get(f"/v1/jobs/{again['id']}").json())["state"] == "succeeded" and j
                    ),
                    60,
                    "a job for the worker that started during the outage",
                )
                assert finished["worker"].endswith(f":{late.pid}")
                assert late.proc.poll() is None
        finally:
            worker.stop()
            if late is not None:
                late.stop()
    statuses = [d["status"] for d in access_log(log_path(data_dir, url))]
    assert 500 not in statuses and 503 in statuses


def test_a_result_waits_out_the_outage_even_if_its_job_is_cancelled_meanwhile(tmp_path):
    """A worker's record write during an outage lands when the broker is back, also when arq's
    backstop timeout cancels the job that was waiting for it (a real redis-server, killed)."""
    with redis_process(tmp_path, persistent=True) as server:
        server.start()

        async def scenario():
            client = broker_client(server.url, Settings(redis_url=server.url))
            link = BrokerLink(client, server.url, 0.05, 0.2)
            records = PatientRecords(RedisRecords(client, 60), link)
            request = KernelRequest.create("identity", {"channels": 2, "spatial": 2}, format="mil")
            job = Job(id=request.key, queue="ane-linux", request=request)
            await records.claim(job.enter(JobState.generating), lambda old: True)
            server.kill()
            write = asyncio.create_task(
                records.update(job.id, lambda j: j.enter(JobState.succeeded))
            )
            await asyncio.sleep(0.5)
            assert not write.done() and not link.reachable and link.status()["outages"] == 1
            write.cancel()  # the job gives up waiting; its result must not be lost
            await asyncio.to_thread(server.start)
            for _ in range(100):
                stored = await RedisRecords(client, 60).get(job.id) if link.reachable else None
                if stored is not None and stored.state == JobState.succeeded:
                    break
                await asyncio.sleep(0.05)
            status = link.status()
            await client.aclose()
            return stored, status

        stored, status = asyncio.run(scenario())
    assert stored is not None and stored.state == JobState.succeeded
    assert status["reachable"] and status["last_outage"]["seconds"] > 0.4


def test_a_connection_lost_under_watch_is_a_broker_fault(tmp_path):
    """arq claims a job under WATCH; redis-py reports the broker dying there as a WatchError
    raised while handling the connection error. That is an outage, which a worker waits out;
    a watched key that changed is not."""
    from redis.exceptions import WatchError

    from app.jobs.broker import is_broker_fault

    async def lost(url: str, kill) -> BaseException:
        client = broker_client(url, Settings(broker_timeout_s=2))
        try:
            async with client.pipeline(transaction=True) as pipe:
                await pipe.watch("claimed")
                kill()
                with pytest.raises(WatchError) as caught:
                    await pipe.get("claimed")
                return caught.value
        finally:
            await client.aclose()

    async def changed(url: str) -> BaseException:
        client = broker_client(url, Settings(broker_timeout_s=2))
        try:
            async with client.pipeline(transaction=True) as pipe:
                await pipe.watch("claimed")
                await client.set("claimed", b"by another worker")
                pipe.multi()
                pipe.set("claimed", b"here")
                with pytest.raises(WatchError) as caught:
                    await pipe.execute()
                return caught.value
        finally:
            await client.aclose()

    with redis_process(tmp_path, persistent=False) as server:
        server.start()
        assert not is_broker_fault(asyncio.run(changed(server.url)))
        assert is_broker_fault(asyncio.run(lost(server.url, server.kill)))
