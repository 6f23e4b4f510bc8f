"""The embedded engine (the `make run` default: jobs inside the API process, no Redis), the job
key, and the job path producing the same bytes as the synchronous path. The compiler is the
labelled stand-in xcrun (tests/fake_xcrun)."""

import asyncio
import contextlib
import os

import numpy as np
import pytest
from jobs_support import FAKE_XCRUN, eventually, pid_gone, xcrun_events

from app.api.problems import from_field_error
from app.api.weight_sources import inline_tensor
from app.artifacts import kernel_zip
from app.cache.store import ContentStore
from app.compile import select_compiler
from app.errors import FieldError, RequestError
from app.jobs.lifecycle import JobState
from app.jobs.select import make_engine
from app.request import KernelRequest
from app.schemas.wire import REQUEST_MODELS, params_of
from app.service.pool import BuildPool
from app.settings import Settings
from app.uploads.blobstore import BlobStore

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

PARAMS = {"in_channels": 4, "out_channels": 8, "spatial": 2}
W = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)


@pytest.fixture
def xcrun_log(monkeypatch, tmp_path):
    log = tmp_path / "xcrun.log"
    monkeypatch.setenv("PATH", f"{FAKE_XCRUN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_XCRUN_LOG", str(log))
    monkeypatch.setenv("FAKE_XCRUN_SLEEP", "dedup=0.5,slow=60")
    monkeypatch.setenv("FAKE_XCRUN_CRASH", "flaky=1,doomed=99")
    for var in ("FAKE_XCRUN_FAIL", "ANE_COMPILER", "ANE_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    return log


@contextlib.asynccontextmanager
async def engine(tmp_path, compiler="xcrun", **settings):
    """An embedded engine wired as the API wires it: builds and compiles in a build pool."""
    cache = ContentStore(tmp_path / "data" / "artifacts", 1 << 30, ".zip")
    blobs = BlobStore(tmp_path / "data" / "blobs", 1 << 30)
    defaults = {"job_retry_backoff_s": 0.05, "compile_timeout_s": 30}
    pool = BuildPool(1, 8, 1)
    eng = make_engine(
        Settings(**{**defaults, **settings}),
        store=cache,
        blobs=blobs,
        compiler=select_compiler(compiler, run=pool.run),
        workdir=tmp_path / "data" / "work",
        run_build=pool.run,
    )
    await asyncio.gather(eng.start(), pool.warm())
    try:
        yield eng
    finally:
        await eng.close()
        pool.shutdown()


def spec(name="conv", fmt="mlmodelc", **kw):
    return KernelRequest.create("conv", PARAMS, {"weight": W}, format=fmt, name=name, **kw)


def test_job_key_is_the_synchronous_paths_cache_key():
    wire = REQUEST_MODELS["conv"].model_validate({"op": "conv", **PARAMS, "format": "mil"})
    sync = KernelRequest.create(
        "conv", params_of(wire), {"weight": inline_tensor("weight", W.tolist())}, format="mil"
    )
    assert spec(name=None, fmt="mil").key == sync.key
    assert spec(name=None, fmt="mil").key != spec(name=None, fmt="mlpackage").key
    assert spec(name="other", fmt="mil").key != sync.key


def test_a_generation_job_gives_the_same_bytes_as_the_synchronous_path(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path) as eng:
            job = await eng.wait((await eng.submit(spec(fmt="mlpackage"))).id, 30)
            return job, (await eng.artifact_path(job)).read_bytes()

    job, data = asyncio.run(scenario())
    assert job.state == JobState.succeeded and job.queue == "ane-linux"
    assert data == kernel_zip("conv", PARAMS, {"weight": W}, format="mlpackage", name="conv")
    assert job.artifact.filename == "conv.mlpackage.zip" and job.artifact.size == len(data)


def test_identical_submissions_compile_once(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path) as eng:
            jobs = await asyncio.gather(*(eng.submit(spec("dedup")) for _ in range(20)))
            return jobs, await eng.wait(jobs[0].id, 30)

    jobs, done = asyncio.run(scenario())
    assert len({j.id for j in jobs}) == 1 and done.state == JobState.succeeded
    assert list(done.stages) == ["queued", "generating", "compiling", "succeeded"]
    assert len(xcrun_events(xcrun_log, "dedup", "start")) == 1


def test_mlmodelc_without_a_compiler_is_refused_at_submit(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path, compiler="none") as eng:
            with pytest.raises(FieldError) as err:
                await eng.submit(spec())
            return from_field_error(err.value), await eng.list()

    problem, listed = asyncio.run(scenario())
    assert problem.status == 503 and problem.field == "format"
    assert listed == []  # nothing half-made


def test_bad_params_are_refused_with_the_field():
    with pytest.raises(RequestError) as err:
        KernelRequest.create("conv", {**PARAMS, "in_channels": 0}, {"weight": W})
    assert err.value.field == "params.in_channels"
    with pytest.raises(RequestError) as err:
        KernelRequest.create("conv", PARAMS, format="exe")
    assert err.value.field == "format"


def test_a_spec_error_found_while_building_fails_the_job_with_its_field(tmp_path, xcrun_log):
    bad = KernelRequest.create(
        "conv", PARAMS, {"weight": np.ones((3, 3), np.float32)}, format="mil"
    )

    async def scenario():
        async with engine(tmp_path) as eng:
            return await eng.wait((await eng.submit(bad)).id, 30)

    job = asyncio.run(scenario())
    assert job.state == JobState.failed and job.error.kind == "spec"
    assert job.error.field == "weights.weight"


def test_cancel_stops_the_compiler_and_a_cancelled_job_can_be_resubmitted(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path) as eng:
            job = await eng.submit(spec("slow"))
            while not xcrun_events(xcrun_log, "slow", "start"):
                await asyncio.sleep(0.05)
            cancelled, now = await eng.cancel(job.id)
            (start,) = xcrun_events(xcrun_log, "slow", "start")
            await asyncio.to_thread(eventually, lambda: pid_gone(start["pid"]), 30, "kill")
            again = await eng.submit(spec("slow"))
            await eng.cancel(again.id)
            return cancelled, now, again, await eng.get(job.id)

    cancelled, now, again, final = asyncio.run(scenario())
    assert now and cancelled.state == final.state == JobState.cancelled
    assert again.run == 1 and again.state == JobState.queued
    assert not xcrun_events(xcrun_log, "slow", "done")


def test_job_timeout_names_its_limit(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path, job_timeout_s=0.5) as eng:
            return await eng.wait((await eng.submit(spec("slow"))).id, 30)

    job = asyncio.run(scenario())
    assert job.state == JobState.failed and job.error.kind == "timeout"
    assert "ANE_JOB_TIMEOUT_S=0.5s" in job.error.message


def test_transient_crashes_retry_then_give_up_after_max_tries(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path, job_max_tries=3) as eng:
            flaky = await eng.wait((await eng.submit(spec("flaky"))).id, 30)
            doomed = await eng.wait((await eng.submit(spec("doomed"))).id, 30)
            return flaky, doomed

    flaky, doomed = asyncio.run(scenario())
    assert flaky.state == JobState.succeeded and flaky.attempts == 2
    assert doomed.state == JobState.failed and doomed.error.kind == "gave_up"
    assert "gave up after 3 attempts" in doomed.error.message
    assert "signal 9" in doomed.error.message
    assert len(xcrun_events(xcrun_log, "doomed", "crash")) == 3


def test_batches_are_one_job_per_kernel(tmp_path, xcrun_log):
    specs = [spec("a", fmt="mil"), spec("b", fmt="mil"), spec("a", fmt="mil")]

    async def scenario():
        async with engine(tmp_path) as eng:
            batch = await eng.submit_batch(specs)
            for job in batch["jobs"]:
                await eng.wait(job["id"], 30)
            return batch, await eng.get_batch(batch["id"])

    batch, later = asyncio.run(scenario())
    assert batch["state"] == "running" and len(batch["jobs"]) == 3
    assert batch["jobs"][0]["id"] == batch["jobs"][2]["id"] != batch["jobs"][1]["id"]
    assert later["state"] == "succeeded" and later["counts"]["succeeded"] == 3
    assert later["jobs"][0]["request"]["weights"]["weight"]["digest"].startswith("sha256:")
    assert "inline" not in later["jobs"][0]["request"]["weights"]["weight"]


def test_finished_jobs_are_forgotten_after_the_keep_time(tmp_path, xcrun_log):
    async def scenario():
        async with engine(tmp_path, job_keep_s=1) as eng:
            job = await eng.wait((await eng.submit(spec(fmt="mil"))).id, 30)
            seen = await eng.get(job.id)
            await asyncio.sleep(1.2)
            return seen, await eng.get(job.id), await eng.list()

    seen, later, listed = asyncio.run(scenario())
    assert seen.state == JobState.succeeded
    assert later is None and listed == []


def test_verify_adds_verification_json_and_its_own_key(tmp_path, xcrun_log):
    import io
    import json
    import zipfile

    wire = REQUEST_MODELS["conv"].model_validate({"op": "conv", **PARAMS, "format": "mil"})
    weights = {"weight": inline_tensor("weight", W.tolist())}
    sync = KernelRequest.create("conv", params_of(wire), weights, format="mil", verify=True)
    verified = spec(name=None, fmt="mil", verify=True)
    assert verified.key == sync.key != spec(name=None, fmt="mil").key

    async def scenario():
        async with engine(tmp_path) as eng:
            out = {}
            for s in (verified, spec(name=None, fmt="mlmodelc", verify=True)):
                job = await eng.wait((await eng.submit(s)).id, 30)
                assert job.state == JobState.succeeded, job.error
                out[s.format] = (await eng.artifact_path(job)).read_bytes()
            return out

    zips = asyncio.run(scenario())
    for data in zips.values():
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            report = json.loads(zf.read("verification.json"))
        assert report["op"] == "conv" and "y" in report["outputs"]  # the reference ran it
