"""A worker killed (SIGKILL) in the middle of a compile: the job still succeeds, on the other
worker, once the dead worker's lease lapses. Real redis-server, real worker processes, the
labelled stand-in xcrun."""

import asyncio
import os
import signal
import zipfile

import numpy as np
import pytest
from jobs_support import WorkerProcess, eventually, redis_server, worker_env, xcrun_events

from app.cache.store import ContentStore
from app.jobs.arq_engine import ArqEngine
from app.jobs.lifecycle import JobState
from app.request import KernelRequest
from app.settings import Settings

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not


@pytest.mark.slow
def test_sigkill_mid_compile_then_the_other_worker_finishes_it(tmp_path):
    data_dir, xcrun_log = tmp_path / "data", tmp_path / "xcrun.log"
    w = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    params = {"in_channels": 4, "out_channels": 8, "spatial": 2}
    spec = KernelRequest.create(
        "conv", params, {"weight": w}, format="mlmodelc", name="victim", placement=True
    )  # Apple's compiler: the macOS queue

    with redis_server(tmp_path) as url:
        env = worker_env(url, data_dir, xcrun_log, FAKE_XCRUN_SLEEP="victim=2")
        workers = [WorkerProcess("ane-macos", env, tmp_path / f"w{i}.log") for i in range(2)]
        try:
            for worker in workers:
                worker.wait_ready(url)

            async def scenario():
                cache = ContentStore(data_dir / "artifacts", 1 << 30, ".zip")
                api = ArqEngine(Settings(redis_url=url), cache)
                await api.start()
                try:
                    job = await api.submit(spec)
                    while not xcrun_events(xcrun_log, "victim", "start"):
                        await asyncio.sleep(0.05)  # mid-compile
                    running = await api.get(job.id)
                    assert running.state == JobState.compiling and running.attempts == 1
                    pid = int(running.worker.rsplit(":", 1)[1])
                    (victim,) = [w for w in workers if w.pid == pid]
                    victim.kill()
                    # The machine is gone, and with it its compiler (the stand-in runs in its
                    # own session, so kill it by the pid it logged).
                    (start,) = xcrun_events(xcrun_log, "victim", "start")
                    os.kill(start["pid"], signal.SIGKILL)
                    done = await api.wait(job.id, 60)
                    path = await api.artifact_path(done)
                    return victim, done, path
                finally:
                    await api.close()

            victim, done, path = asyncio.run(scenario())
            (survivor,) = [w for w in workers if w is not victim]
            assert done.state == JobState.succeeded, done.error
            assert done.attempts == 2
            assert done.worker.endswith(f":{survivor.pid}")
            assert [e["event"] for e in xcrun_events(xcrun_log, "victim")] == [
                "start",
                "start",
                "done",
            ]
            with zipfile.ZipFile(path) as zf:
                assert "victim.mlmodelc/model.mil" in zf.namelist()

            # the dead worker's heartbeat lapses too
            async def workers_now():
                api = ArqEngine(Settings(redis_url=url), None)
                await api.start()
                try:
                    return [w.pid for w in await api.workers()]
                finally:
                    await api.close()

            eventually(
                lambda: asyncio.run(workers_now()) == [survivor.pid], 30, "the heartbeat to lapse"
            )
        finally:
            for worker in workers:
                worker.stop()
