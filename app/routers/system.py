"""Service endpoints: /v1/info, /healthz, /readyz, /metrics."""

from __future__ import annotations

import platform

from fastapi import APIRouter, Depends, Response

from app import GENERATOR, __version__
from app.api.context import Services, services
from app.api.openapi import problems
from app.api.problems import Problem
from app.core.formats import COMPILED, available_formats
from app.core.toolchain import coreai_version, coremltools_version
from app.errors import ErrorKind, FieldError
from app.kernels import CATALOG
from app.mil import TARGETS
from app.schemas.wire import Info, Versions

router = APIRouter(tags=["service"])


@router.get("/v1/info", summary="Versions, formats and limits", response_model=Info)
async def info(svc: Services = Depends(services)) -> Info:
    # mlmodelc is available when a job worker has a compiler backend: this process's own (the
    # linux backend anywhere, xcrun on a Mac) or a farm worker's with a live heartbeat.
    try:
        compilers = [w for w in await svc.jobs.workers() if w.compiler]
    except FieldError as exc:  # the broker is away: no farm worker can be seen, nor reached
        if exc.kind != ErrorKind.UNAVAILABLE:
            raise
        compilers = []
    remote = [w for w in compilers if w.queue != "embedded"]
    can_compile = bool(compilers)
    s = svc.settings
    return Info(
        versions=Versions(
            service=__version__,
            generator=f"{GENERATOR} {__version__}",
            coremltools=coremltools_version(),
            python=platform.python_version(),
        ),
        formats=available_formats(compiler=can_compile, coreai=coreai_version() is not None),
        compiler={
            "available": can_compile,
            "name": compilers[0].compiler if compilers else None,
            "formats": list(COMPILED) if can_compile else [],
            "workers": len(remote),
        },
        targets=list(TARGETS),
        ops=list(CATALOG),
        limits={
            "max_json_bytes": s.max_json_bytes,
            "max_weight_bytes": s.max_weight_bytes,
            "max_body_bytes": s.max_body_bytes,
            "max_artifact_bytes": s.max_artifact_bytes,
            "max_checkpoint_bytes": s.max_checkpoint_bytes,
            "cache_max_bytes": s.cache_max_bytes,
            "kit_cache_max_bytes": s.kit_cache_max_bytes,
            "job_timeout_s": s.job_timeout_s,
            "kit_timeout_base_s": s.kit_timeout_base_s,
            "kit_timeout_s_per_gb": s.kit_timeout_s_per_gb,
            "max_verify_bytes": s.max_verify_bytes,
            "max_upload_bytes": s.max_upload_bytes,
            "upload_part_bytes": s.upload_part_bytes,
            "max_uploads_in_progress": s.max_uploads_in_progress,
            "max_upload_reserved_bytes": s.max_upload_reserved_bytes,
            "upload_part_timeout_s": s.upload_part_timeout_s,
            "workers": s.workers,
            "max_backlog": s.max_backlog,
        },
    )


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: storage writable with room to spare, the job broker reachable",
    responses=problems(503),
)
async def readyz(svc: Services = Depends(services)) -> dict[str, str]:
    problems_found = await svc.readiness()
    if problems_found:
        raise Problem(
            503, "; ".join(problems_found.values()), title="Not ready", checks=problems_found
        )
    return {"status": "ready"}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(svc: Services = Depends(services)) -> Response:
    body, content_type = svc.metrics.exposition()
    return Response(body, media_type=content_type)
