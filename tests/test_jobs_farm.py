"""Jobs through arq with real parts: a private redis-server, real `ane-kernels worker` processes
(one per queue), the labelled stand-in xcrun as the compiler, an ArqEngine as the API side.

The stand-in logs every compile it is asked for, so "one compile happened" is counted by the
compiler itself. Its per-model controls make some kernels slow or failing by name.
"""

import asyncio
import contextlib
import io
import json
import subprocess
import zipfile

import numpy as np
import pytest
import redis
from jobs_support import (
    WorkerProcess,
    eventually,
    pid_gone,
    redis_server,
    worker_env,
    xcrun_events,
)

from app.artifacts import kernel_zip
from app.cache.store import ContentStore
from app.jobs.arq_engine import ArqEngine
from app.jobs.lifecycle import JobState
from app.request import KernelRequest, WeightRef
from app.settings import Settings

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

COMPILE_TIMEOUT_S = 3
CONTROLS = {
    "FAKE_XCRUN_SLEEP": "dedup=0.8,slowish=0.8,cancelme=60,tooslow=60",
    "FAKE_XCRUN_FAIL": "bad",
    "FAKE_XCRUN_CRASH": "flaky=1",
    "ANE_COMPILE_TIMEOUT_S": str(COMPILE_TIMEOUT_S),
    "ANE_JOB_KEEP_S": "600",
    "ANE_DEVICE_CHECK_RUNTIME": "stand-in",  # the labelled stand-in for Core ML
}
KEEP_S = 600


class Farm:
    def __init__(self, url, data_dir, xcrun_log, workers):
        self.url, self.data_dir, self.xcrun_log, self.workers = url, data_dir, xcrun_log, workers

    @contextlib.asynccontextmanager
    async def engine(self):
        """An API-side engine: what the HTTP layer holds (a fresh one per 'API process')."""
        cache = ContentStore(self.data_dir / "artifacts", 1 << 30, ".zip")
        settings = Settings(redis_url=self.url, job_keep_s=KEEP_S)
        engine = ArqEngine(settings, cache)
        await engine.start()
        try:
            yield engine
        finally:
            await engine.close()


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    root = tmp_path_factory.mktemp("farm")
    data_dir, xcrun_log = root / "data", root / "xcrun.log"
    with redis_server(root) as url:
        env = worker_env(url, data_dir, xcrun_log, **CONTROLS)
        # A Linux worker has no xcrun: its .mlmodelc come from the linux backend.
        envs = {"ane-macos": env, "ane-linux": {**env, "ANE_COMPILER": "linux"}}
        workers = {q: WorkerProcess(q, e, root / f"{q}.log") for q, e in envs.items()}
        try:
            for w in workers.values():
                w.wait_ready(url)
            yield Farm(url, data_dir, xcrun_log, workers)
        finally:
            for w in workers.values():
                w.stop()


def conv_spec(name, fmt="mlmodelc", seed=0, placement=None):
    """A conv request; an mlmodelc one asks for Core ML's placement report (the macOS queue)
    unless `placement` says otherwise."""
    w = np.random.default_rng(seed).standard_normal((8, 4)).astype(np.float32)
    params = {"in_channels": 4, "out_channels": 8, "spatial": 2}
    placement = fmt == "mlmodelc" if placement is None else placement
    return KernelRequest.create(
        "conv", params, {"weight": w}, format=fmt, name=name, placement=placement
    )


def worker_id(farm, queue):
    client = redis.Redis.from_url(farm.url)
    try:
        pid = farm.workers[queue].pid
        (key,) = [k.decode() for k in client.keys("ane:worker:*") if k.decode().endswith(f":{pid}")]
        return key.removeprefix("ane:worker:")
    finally:
        client.close()


def test_submit_poll_download_mlmodelc_on_the_macos_worker(farm):
    async def scenario():
        async with farm.engine() as api:
            job = await api.submit(conv_spec("e2e"))
            assert job.state == JobState.queued and job.queue == "ane-macos"
            assert job.id == conv_spec("e2e").key  # the id is the request's cache key
            job = await api.wait(job.id, 60)
            path = await api.artifact_path(job)
            return job, path.read_bytes()

    job, data = asyncio.run(scenario())
    assert job.state == JobState.succeeded, job.error
    assert list(job.stages) == ["queued", "generating", "compiling", "succeeded"]
    assert job.stages["queued"] <= job.stages["generating"] <= job.stages["compiling"]
    assert job.worker == worker_id(farm, "ane-macos") and job.attempts == 1
    assert job.toolchain["macos_build"] == "24A335-STAND-IN"
    assert job.placement == {
        "available": False,
        "reason": "MLComputePlan needs macOS 14.4+; this worker runs linux",
    }
    zpath = farm.data_dir / "download.zip"
    zpath.write_bytes(data)
    with zipfile.ZipFile(zpath) as zf:
        names = zf.namelist()
        kernel = zf.read("kernel.json").decode()
        log = zf.read("compile.log").decode()
    assert "e2e.mlmodelc/model.mil" in names and "e2e.mlmodelc/weights/weight.bin" in names
    assert '"24A335-STAND-IN"' in kernel and '"format": "mlmodelc"' in kernel
    assert "xcrun coremlcompiler compile src/e2e.mlpackage out --platform iOS" in log
    assert job.artifact.filename == "e2e.mlmodelc.zip"
    assert len(xcrun_events(farm.xcrun_log, "e2e", "done")) == 1
    # Every compile by Apple's compiler is checked against the linux backend's bundle: the
    # stand-in writes nothing like Apple's files, and the job says which differ.
    assert job.conformance["backend"] == "linux" and job.conformance["identical"] is False
    assert "model.mil" in job.conformance["different"]
    # a release the linux backend has not seen: its own version, the nearest observed rules
    assert job.conformance["profile"] == "3405.2.1"
    assert "layout rules of 3404.23.1: not observed" in job.conformance["note"]
    assert '"conformance"' in kernel


def test_mlmodelc_without_placement_compiles_on_the_linux_worker(farm):
    spec = conv_spec("anywhere", placement=False)

    async def scenario():
        async with farm.engine() as api:
            job = await api.submit(spec)
            assert job.queue == "ane-linux"
            job = await api.wait(job.id, 60)
            return job, (await api.artifact_path(job)).read_bytes()

    job, data = asyncio.run(scenario())
    assert job.state == JobState.succeeded, job.error
    assert job.worker == worker_id(farm, "ane-linux") and job.conformance is None
    assert job.toolchain["compiler"] == "linux"
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        kernel = json.loads(zf.read("kernel.json"))
        assert "anywhere.mlmodelc/coremldata.bin" in zf.namelist()
    assert kernel["compiler"]["backend"] == "linux"
    assert not xcrun_events(farm.xcrun_log, "anywhere")


def test_generation_jobs_run_on_the_linux_worker(farm):
    async def scenario():
        async with farm.engine() as api:
            job = await api.submit(conv_spec("gen", fmt="mil"))
            job = await api.wait(job.id, 60)
            return job, (await api.artifact_path(job)).read_bytes()

    job, data = asyncio.run(scenario())
    assert job.state == JobState.succeeded and job.queue == "ane-linux"
    assert job.worker == worker_id(farm, "ane-linux")
    assert list(job.stages) == ["queued", "generating", "succeeded"]
    assert not xcrun_events(farm.xcrun_log, "gen")
    assert data[:2] == b"PK"


def test_fifty_identical_submissions_compile_once(farm):
    async def scenario():
        async with contextlib.AsyncExitStack() as stack:
            # five API processes' worth of engines and connections, racing
            apis = [await stack.enter_async_context(farm.engine()) for _ in range(5)]
            spec = conv_spec("dedup")
            jobs = await asyncio.gather(*(apis[i % 5].submit(spec) for i in range(50)))
            done = await apis[0].wait(jobs[0].id, 60)
            again = await apis[1].submit(conv_spec("dedup"))  # after success: the same job
            return jobs, done, again

    jobs, done, again = asyncio.run(scenario())
    assert {j.id for j in jobs} == {done.id} and {j.run for j in jobs} == {0}
    assert done.state == JobState.succeeded
    assert again.state == JobState.succeeded and again.stages == done.stages
    assert len(xcrun_events(farm.xcrun_log, "dedup", "start")) == 1


def test_cancel_a_running_compile_kills_the_compiler(farm):
    async def scenario():
        async with farm.engine() as api:
            job = await api.submit(conv_spec("cancelme"))
            while not xcrun_events(farm.xcrun_log, "cancelme", "start"):
                await asyncio.sleep(0.05)  # the compiler is running
            assert (await api.get(job.id)).state == JobState.compiling
            cancelled, now = await api.cancel(job.id)
            _, twice = await api.cancel(job.id)
            await asyncio.sleep(0.5)  # give a wrongly surviving job the chance to overwrite it
            return cancelled, now, twice, await api.get(job.id)

    cancelled, now, twice, final = asyncio.run(scenario())
    assert now and not twice
    assert cancelled.state == final.state == JobState.cancelled
    assert final.error.kind == "cancelled"
    (start,) = xcrun_events(farm.xcrun_log, "cancelme", "start")
    eventually(lambda: pid_gone(start["pid"]), 30, "the cancelled compiler to be killed")
    assert not xcrun_events(farm.xcrun_log, "cancelme", "done")


def test_a_compile_past_the_timeout_fails_naming_the_limit(farm):
    async def scenario():
        async with farm.engine() as api:
            job = await api.submit(conv_spec("tooslow"))
            return await api.wait(job.id, 60)

    job = asyncio.run(scenario())
    assert job.state == JobState.failed and job.error.kind == "timeout"
    assert f"ANE_COMPILE_TIMEOUT_S={COMPILE_TIMEOUT_S}s" in job.error.message
    assert job.attempts == 1  # a timeout is the model's doing: not retried
    (start,) = xcrun_events(farm.xcrun_log, "tooslow", "start")
    eventually(lambda: pid_gone(start["pid"]), 30, "the timed-out compiler to be killed")


def test_compiler_failure_surfaces_its_message_and_is_not_retried(farm):
    async def scenario():
        async with farm.engine() as api:
            first = await api.wait((await api.submit(conv_spec("bad"))).id, 60)
            # a failed job may be submitted again: a new run of the same job
            resubmitted = await api.submit(conv_spec("bad"))
            second = await api.wait(resubmitted.id, 60)
            return first, resubmitted, second

    first, resubmitted, second = asyncio.run(scenario())
    assert first.state == JobState.failed and first.error.kind == "compiler"
    assert "Failed to parse the model specification" in first.error.message
    assert "rejected bad" in first.error.message
    assert "internal error" not in first.error.message.lower()
    assert first.attempts == 1
    assert resubmitted.run == 1 and resubmitted.state == JobState.queued
    assert second.state == JobState.failed and second.run == 1
    assert len(xcrun_events(farm.xcrun_log, "bad", "start")) == 2


def test_a_crashed_compiler_is_retried_with_backoff(farm):
    async def scenario():
        async with farm.engine() as api:
            return await api.wait((await api.submit(conv_spec("flaky"))).id, 60)

    job = asyncio.run(scenario())
    assert job.state == JobState.succeeded and job.attempts == 2
    assert job.last_error is None
    events = [e["event"] for e in xcrun_events(farm.xcrun_log, "flaky")]
    assert events == ["start", "crash", "start", "done"]


def test_a_new_api_instance_sees_jobs_in_flight(farm):
    async def scenario():
        async with farm.engine() as first_api:
            job = await first_api.submit(conv_spec("slowish"))
        # the first API process is gone; its job is not
        async with farm.engine() as second_api:
            seen = await second_api.get(job.id)
            listed = [j.id for j in await second_api.list(100)]
            done = await second_api.wait(job.id, 60)
            path = await second_api.artifact_path(done)
        return job, seen, listed, done, path

    job, seen, listed, done, path = asyncio.run(scenario())
    assert seen is not None and seen.id == job.id
    assert job.id in listed
    assert done.state == JobState.succeeded, done.error
    assert path is not None and path.is_file()


def test_workers_heartbeat_with_queue_platform_and_toolchain(farm):
    async def scenario():
        async with farm.engine() as api:
            return await api.workers()

    workers = {w.queue: w for w in asyncio.run(scenario())}
    assert set(workers) == {"ane-macos", "ane-linux"}
    mac, linux = workers["ane-macos"], workers["ane-linux"]
    assert mac.pid == farm.workers["ane-macos"].pid and mac.platform == "linux"
    assert mac.compiler == "xcrun" and mac.toolchain["xcode"].startswith("Xcode 16.0")
    assert linux.compiler == "linux" and linux.toolchain["coremlcompiler"] == "3500.32.1"


def test_a_weight_uploaded_after_the_workers_started_is_found_by_digest(farm):
    from app.tensors.headers import sniff
    from app.uploads.blobstore import BlobStore

    blobs = BlobStore(farm.data_dir / "blobs", 1 << 30)  # the API's view of the shared volume
    w = np.random.default_rng(7).standard_normal((8, 4)).astype(np.float32)
    spool = blobs.new_spool_path()
    with open(spool, "wb") as f:
        np.save(f, w)
    tensor = blobs.put(sniff(spool, "weights.weight"))
    ref = WeightRef(tensor.digest, "float32", (8, 4))  # by digest only, as a farm API sends it
    uploaded = conv_spec("uploaded", fmt="mil").with_weights({"weight": ref})
    missing_ref = WeightRef("sha256:" + "0" * 64, "float32", (8, 4))
    missing = uploaded.with_weights({"weight": missing_ref})

    async def scenario():
        async with farm.engine() as api:
            ok = await api.wait((await api.submit(uploaded)).id, 60)
            bad = await api.wait((await api.submit(missing)).id, 60)
            return ok, (await api.artifact_path(ok)).read_bytes(), bad

    ok, data, bad = asyncio.run(scenario())
    assert ok.state == JobState.succeeded, ok.error
    # the same bytes as the same kernel with the weight sent inline
    inline = KernelRequest.create(
        "conv",
        {"in_channels": 4, "out_channels": 8, "spatial": 2},
        {"weight": w},
        format="mil",
        name="uploaded",
    )
    assert uploaded.key == inline.key
    assert data == kernel_zip(
        "conv", inline.params_json, {"weight": w}, format="mil", name="uploaded"
    )
    assert bad.state == JobState.failed and bad.error.field == "weights.weight"
    assert "not in the blob store" in bad.error.message


def test_finished_jobs_expire_after_the_keep_time(farm):
    async def scenario():
        async with farm.engine() as api:
            job = await api.wait((await api.submit(conv_spec("kept", fmt="mil"))).id, 60)
            ttl = await api.redis.ttl(f"ane:job:{job.id}")
            return job, ttl

    job, ttl = asyncio.run(scenario())
    assert job.state == JobState.succeeded
    assert 0 < ttl <= KEEP_S


def test_worker_check_reports_this_hosts_heartbeat(farm):
    from jobs_support import WORKER_BIN, free_port

    def check(url):
        return subprocess.run(
            [str(WORKER_BIN), "worker", "--queue", "ane-linux", "--check", "--redis-url", url],
            capture_output=True,
        ).returncode

    assert check(farm.url) == 0
    assert check(f"redis://127.0.0.1:{free_port()}/0") == 1  # no Redis there: not healthy


def test_a_model_kit_job_runs_on_the_linux_worker_its_device_check_on_the_macos_one(farm, tmp_path):
    """POST /v1/models' job through arq: the checkpoint's files as blobs on the shared volume,
    the kit built by the Linux worker with a stage per program, equal to the local build; then
    its device check, run by the macOS worker."""
    import shutil

    from kit_support import KIT_QWEN3, write_model

    from app.core.digest import file_digest
    from app.kits import model_zip
    from app.kits.job import DeviceCheckRequest, ModelRequest
    from app.uploads.blobstore import BlobStore

    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=4)
    blobs = BlobStore(farm.data_dir / "blobs", 1 << 30)  # the API's view of the shared volume
    files = {}
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".json", ".safetensors")):
        spool = blobs.new_spool_path()
        shutil.copyfile(path, spool)
        files[path.name] = blobs.put_file(spool, file_digest(path))["digest"]
    options = {"format": "mlpackage", "context": 16, "prefill": 4}
    request = ModelRequest.create(files, options)
    check = DeviceCheckRequest.create(request.key, "m4", max_new_tokens=2)

    async def scenario():
        async with farm.engine() as api:
            job = await api.wait((await api.submit(request)).id, 120)
            data = (await api.artifact_path(job)).read_bytes()
            return job, data, await api.wait((await api.submit(check)).id, 120)

    job, data, checked = asyncio.run(scenario())
    assert job.state == JobState.succeeded, job.error
    assert job.queue == "ane-linux" and job.worker == worker_id(farm, "ane-linux")
    assert {"decoder_0", "head_0"} <= set(job.stages)
    assert data == model_zip(folder, **options)
    # the device check goes to the macOS worker (here with the stand-in for Core ML)
    assert checked.state == JobState.succeeded, checked.error
    assert checked.queue == "ane-macos" and checked.worker == worker_id(farm, "ane-macos")
    assert checked.device_check["stand_in"] and checked.device_check["passed"]


def test_a_kit_jobs_own_time_limit_reaches_the_worker_that_runs_it(farm, tmp_path):
    """The limits the API derived from the checkpoint go with the job's record: the Linux worker
    (whose own settings would allow 900 s and more) stops the kit job at the API's 1 ms (the
    verified build takes hundreds of times that)."""
    import shutil

    from kit_support import KIT_QWEN3, write_model

    from app.core.digest import file_digest
    from app.kits.job import ModelRequest
    from app.kits.limits import kit_limits
    from app.uploads.blobstore import BlobStore

    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=7)
    blobs = BlobStore(farm.data_dir / "blobs", 1 << 30)
    files = {}
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".json", ".safetensors")):
        spool = blobs.new_spool_path()
        shutil.copyfile(path, spool)
        files[path.name] = blobs.put_file(spool, file_digest(path))["digest"]
    request = ModelRequest.create(
        files, {"format": "mil", "context": 16, "prefill": 4, "verify": True}
    )
    api_settings = Settings(kit_timeout_base_s=0.001, kit_timeout_s_per_gb=0)
    limits = kit_limits(request, blobs.file_path, api_settings)

    async def scenario():
        async with farm.engine() as api:
            return await api.wait((await api.submit(request, limits)).id, 120)

    job = asyncio.run(scenario())
    assert job.state == JobState.failed and job.error.kind == "timeout"
    assert job.worker == worker_id(farm, "ane-linux") and job.limits == limits
    assert "time limit of 0.001s (ANE_KIT_TIMEOUT_BASE_S" in job.error.message
