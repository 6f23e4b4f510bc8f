"""A model kit's job (POST /v1/models): the kit built in the build pool from the checkpoint's
blobs, a stage recorded per program as the build reaches it, the zip published to the artifact
cache under the job's key (a second request for the same checkpoint and options finds it).
And a device check's (POST /v1/device-checks, a macOS worker's): its report, into the job."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from app.cache.store import ContentStore
from app.compile.placement import unavailable_reason as placement_unavailable
from app.compile.runner import RunBuild
from app.core.files import discard
from app.errors import ErrorKind, FieldError, RequestError
from app.jobs.lifecycle import Job, artifact_ref
from app.jobs.runtime import Runtime, Toolchains, reach
from app.kits.job import (
    DeviceCheckRequest,
    ModelRequest,
    build_kit_zip,
    checkpoint_folder,
    run_device_check,
)
from app.storage import KIT_POOL
from app.uploads.blobstore import BlobStore

POLL_S = 0.25


def stage_of(line: str) -> str:
    """A build's progress line -> the stage it starts: "[2/5] decoder_1: layers 2-3" ->
    "decoder_1"; "verifying against the float64 model" -> "verifying"."""
    if line.startswith("["):
        return line.partition("] ")[2].partition(":")[0]
    return line.split(" ", 1)[0]


class KitJobs:
    """How a `ModelRequest` runs as a job."""

    def refusal(self, request: ModelRequest, rt: Runtime) -> FieldError | None:
        return None  # any worker builds a kit

    async def stored(
        self,
        request: ModelRequest,
        store: ContentStore,
        toolchains: Toolchains,
    ) -> dict[str, Any] | None:
        entry = await asyncio.to_thread(store.get, request.key)
        return None if entry is None else {"artifact": artifact_ref(entry)}

    async def produce(self, request: ModelRequest, rt: Runtime, job: Job) -> dict[str, Any]:
        """The kit built in the build pool, a stage recorded per program it reaches."""
        return await produce_kit(
            rt.store, rt.blobs, rt.workdir, rt.run_build, job.id, request, partial(reach, rt, job)
        )


async def produce_kit(
    store: ContentStore,
    blobs: BlobStore,
    workdir: Path,
    run_build: RunBuild,
    key: str,
    request: ModelRequest,
    stage: Callable[[str], Awaitable[None]],
) -> dict[str, Any]:
    found = await asyncio.to_thread(store.get, key)
    if found is not None:
        return {"artifact": artifact_ref(found)}
    scratch = workdir / uuid.uuid4().hex
    out = store.temp_path()
    build: asyncio.Future | None = None
    try:
        folder = await asyncio.to_thread(
            checkpoint_folder, request, scratch / "checkpoint", blobs.file_path
        )
        progress = scratch / "progress.txt"
        progress.touch()
        build = asyncio.ensure_future(
            run_build(build_kit_zip, request, folder, out, progress, alone=True)
        )
        seen = 0
        while True:
            await asyncio.wait({build}, timeout=POLL_S)
            lines = progress.read_text(encoding="utf-8").splitlines()
            for line in lines[seen:]:
                await stage(stage_of(line))
            seen = len(lines)
            if build.done():
                break
        built = build.result()
        meta = {
            "op": request.op,
            "format": request.kit_options().format,
            "kind": "model_kit",
            "digest": built["digest"],
            "filename": request.filename,
            "verified": built["verified"],
            "pool": KIT_POOL,
        }
        entry = await asyncio.to_thread(store.publish, key, out, meta)
    finally:
        discard(out)
        shutil.rmtree(scratch, ignore_errors=True)
        if build is not None and not build.done():
            # The job stopped (its time limit, a cancel) while the build runs on where it cannot
            # be interrupted: the zip it may still write goes when it ends.
            build.add_done_callback(lambda done: _discard_after(done, out))
    return {"artifact": artifact_ref(entry)}


def _discard_after(build: asyncio.Future, out: Path) -> None:
    discard(out)
    if not build.cancelled():
        build.exception()  # seen: the job has already ended for its own reason


class DeviceCheckJobs:
    """How a `DeviceCheckRequest` runs as a job: on a macOS worker (its queue), the report
    into the job's record."""

    def refusal(self, request: DeviceCheckRequest, rt: Runtime) -> FieldError | None:
        """A device check with Core ML (not its labelled stand-in) where Core ML cannot run."""
        if rt.settings.device_check_runtime == "coreml" and (reason := placement_unavailable()):
            return FieldError(
                "kit",
                f"a device check runs the kit with Core ML, which this "
                f"service cannot ({reason}); set ANE_REDIS_URL and add a macOS "
                "worker",
                kind=ErrorKind.UNAVAILABLE,
                title="Core ML unavailable",
            )
        return None

    async def stored(
        self,
        request: DeviceCheckRequest,
        store: ContentStore,
        toolchains: Toolchains,
    ) -> dict[str, Any] | None:
        return None  # its report is in the job's record, never in the artifact cache

    async def produce(self, request: DeviceCheckRequest, rt: Runtime, job: Job) -> dict[str, Any]:
        return await check_on_device(
            rt.store, rt.run_build, request, rt.settings.device_check_runtime
        )


async def check_on_device(
    store: ContentStore, run_build: RunBuild, request: DeviceCheckRequest, runtime: str
) -> dict[str, Any]:
    entry = await asyncio.to_thread(store.get, request.kit)
    if entry is None or entry.meta.get("kind") != "model_kit":
        raise RequestError(
            "kit",
            f"no kit {request.kit!r} in the artifact cache: name a "
            "succeeded POST /v1/models job (build it again if it was evicted)",
        )
    report = await run_build(
        run_device_check, request, entry.path, runtime, store.tmp_dir, alone=True
    )
    return {"device_check": report}
