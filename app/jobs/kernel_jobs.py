"""A kernel request's job (app/request.py: a catalog op, a package of functions, a graph):

    mil / mlpackage / aimodel: build and package (app/artifacts.py, in the build pool)
                               -> publish into the artifact cache
    mlmodelc: toolchain -> cached compile? -> compiling -> compile, placement -> publish
    aimodel with architectures: the same, the compile being `xcrun coreai-build` per
                               architecture (app/compile/aimodelc.py), on a macOS worker

Built and zipped exactly as the synchronous path does; a compiled artifact's key adds the
compiler's toolchain, so a new compiler compiles afresh.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

from app import artifacts
from app.cache.store import ContentStore
from app.compile import CompilerUnavailable
from app.compile.aimodelc import build_asset, compile_asset_zip
from app.compile.coreai_build import CoreAIBuild
from app.compile.coreai_build import available as coreai_build_available
from app.compile.kernel import build_package, compile_package_zip
from app.compile.placement import unavailable_reason as placement_unavailable
from app.compile.runner import runs_alone
from app.core.formats import COMPILED, available_formats
from app.core.toolchain import coreai_version
from app.errors import ErrorKind, FieldError
from app.jobs.lifecycle import Job, JobState, artifact_ref
from app.jobs.runtime import Runtime, Toolchains, enter
from app.request import KernelRequest


class KernelJobs:
    """How a `KernelRequest` runs as a job."""

    def refusal(self, request: KernelRequest, rt: Runtime) -> FieldError | None:
        """Why a service whose jobs run in its own process can never build `request`: a
        compiled format without a compiler backend, Core ML's placement report or Core AI's
        device compile without macOS."""
        if request.artifact_format.compiled and rt.compiler is None:
            servable = available_formats(compiler=False, coreai=coreai_version() is not None)
            return FieldError(
                "format",
                f"format {', '.join(COMPILED)} needs a compiler backend and this service has none "
                f"(ANE_COMPILER={rt.settings.compiler}). Available formats: "
                f"{', '.join(servable)}",
                kind=ErrorKind.UNAVAILABLE,
                title="Compiler unavailable",
                available_formats=servable,
            )
        if request.placement and (reason := placement_unavailable()) is not None:
            return FieldError(
                "placement",
                f"Core ML's placement report needs a macOS worker ({reason}); set ANE_REDIS_URL "
                "and add one, or ask without placement",
                kind=ErrorKind.UNAVAILABLE,
                title="Placement report unavailable",
            )
        if request.architectures is not None and not coreai_build_available():
            return FieldError(
                "architectures",
                "a device compile runs `xcrun coreai-build` on a macOS worker (macOS 27 with Xcode "
                "27), and this service has no xcrun; set ANE_REDIS_URL and add an ane-macos "
                "worker, or ask without architectures for the .aimodel alone",
                kind=ErrorKind.UNAVAILABLE,
                title="Device compile unavailable",
            )
        return None

    async def stored(
        self,
        request: KernelRequest,
        store: ContentStore,
        toolchains: Toolchains,
    ) -> dict[str, Any] | None:
        """The finished job's fields when the artifact cache holds the request's artifact: under
        its key, or for a compiled format under its key for a toolchain a live worker has."""
        if not request.compiled:
            entry = await asyncio.to_thread(store.get, request.key)
            return None if entry is None else {"artifact": artifact_ref(entry)}
        if request.architectures is not None:  # workers announce no coreai-build toolchain:
            return None  # the worker finds its cached compile itself
        for toolchain in await toolchains():
            entry = await asyncio.to_thread(store.get, request.compiled_key(toolchain))
            if entry is not None:
                return {
                    "artifact": artifact_ref(entry),
                    "toolchain": toolchain,
                    "placement": entry.meta.get("placement"),
                }
        return None

    async def produce(self, request: KernelRequest, rt: Runtime, job: Job) -> dict[str, Any]:
        """The job's record changes once it has succeeded (its artifact, and for a compiled
        format the toolchain and placement); its weights are found in the shared blob store."""
        request = await asyncio.to_thread(rt.blobs.locate, request)
        if request.compiled:
            return await _compiled(rt, job, request)
        if not request.bypass_cache:
            found = await asyncio.to_thread(rt.store.get, job.id)
            if found is not None:
                return {"artifact": artifact_ref(found)}
        limits = artifacts.Limits.of(rt.settings)
        alone = runs_alone(request.weight_bytes)
        location = rt.store.location
        build = artifacts.build_and_publish
        stored = await rt.run_build(build, request, location, job.id, limits, alone=alone)
        return {"artifact": artifact_ref(rt.store.adopt(stored.published))}


async def _compiled(rt: Runtime, job: Job, request: KernelRequest) -> dict[str, Any]:
    """The compiled road: the package (or .aimodel) built in the build pool, then compiled."""
    compiler = rt.device_compiler if request.architectures is not None else rt.compiler
    if compiler is None:
        raise CompilerUnavailable(
            f"worker {rt.worker_id} has no compiler backend (ANE_COMPILER={rt.settings.compiler})"
        )
    toolchain = await compiler.toolchain()
    # The compiled artifact's key adds the toolchain: a new Xcode compiles afresh.
    key = request.compiled_key(toolchain)
    if not request.bypass_cache:
        found = await asyncio.to_thread(rt.store.get, key)
        if found is not None:
            return {
                "artifact": artifact_ref(found),
                "placement": found.meta.get("placement"),
                "toolchain": toolchain,
                "conformance": found.meta.get("conformance"),
            }

    async def compiling() -> None:
        await enter(rt, job, JobState.compiling)

    limits = artifacts.Limits.of(rt.settings)
    alone = runs_alone(request.weight_bytes)
    workdir = rt.scratch()
    timeout_s = rt.settings.compile_timeout_s
    meta: dict[str, Any] = {
        "op": request.op,
        "format": request.format,
        "toolchain": toolchain,
        "filename": request.filename,
    }
    try:
        if request.architectures is not None:
            asset = await rt.run_build(build_asset, request, limits, workdir, alone=alone)
            aimodelc = await compile_asset_zip(
                asset,
                rt.device_compiler,
                workdir,
                list(request.architectures),
                timeout_s,
                on_compiling=compiling,
            )
            meta |= {
                "digest": aimodelc.digest,
                "preflight": asset.preflight,
                "architectures": list(request.architectures),
            }
            entry = await asyncio.to_thread(rt.store.publish, key, aimodelc.zip_path, meta)
            return {"artifact": artifact_ref(entry), "toolchain": toolchain}
        assert not isinstance(compiler, CoreAIBuild)  # no architectures: Core ML's compiler
        package = await rt.run_build(build_package, request, limits, workdir, alone=alone)
        compiled = await compile_package_zip(
            package,
            compiler,
            workdir,
            timeout_s,
            run=rt.run_build,
            on_compiling=compiling,
        )
        placement = compiled.placement.get("summary") or {
            "available": False,
            "reason": compiled.placement.get("reason"),
        }
        meta |= {
            "placement": placement,
            "conformance": compiled.conformance,
            "digest": compiled.digest,
            "preflight": package.preflight,
        }
        entry = await asyncio.to_thread(rt.store.publish, key, compiled.zip_path, meta)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "artifact": artifact_ref(entry),
        "placement": placement,
        "toolchain": toolchain,
        "conformance": compiled.conformance,
    }
