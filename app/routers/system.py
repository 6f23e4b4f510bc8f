"""Service endpoints: /v1/info, /healthz, /readyz, /metrics."""

from __future__ import annotations

import platform

from fastapi import APIRouter, Depends, Response

from app import GENERATOR, __version__
from app.kernels import KERNELS
from app.mil import TARGETS
from app.packaging import FORMATS, coremltools_version
from app.routers.responses import problems
from app.schemas.requests import Info, Versions
from app.service.context import Services, services
from app.service.problems import Problem

router = APIRouter(tags=["service"])


@router.get("/v1/info", summary="Versions, formats and limits", response_model=Info)
async def info(svc: Services = Depends(services)) -> Info:
    # mlmodelc is available when a job worker has a compiler: this process's own (a Mac with
    # Xcode) or a farm's macOS worker with a live heartbeat.
    compilers = [w for w in await svc.jobs.workers() if w.compiler]
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
        formats=[*FORMATS, "mlmodelc"] if can_compile else list(FORMATS),
        compiler={
            "available": can_compile,
            "name": compilers[0].compiler if compilers else None,
            "formats": ["mlmodelc"] if can_compile else [],
            "workers": len(remote),
        },
        targets=list(TARGETS),
        ops=list(KERNELS),
        limits={
            "max_json_bytes": s.max_json_bytes,
            "max_weight_bytes": s.max_weight_bytes,
            "max_body_bytes": s.max_body_bytes,
            "max_artifact_bytes": s.max_artifact_bytes,
            "workers": s.workers,
            "max_backlog": s.max_backlog,
        },
    )


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: storage is writable", responses=problems(503))
async def readyz(svc: Services = Depends(services)) -> dict[str, str]:
    ok, why = svc.ready()
    if not ok:
        raise Problem(503, why, title="Not ready")
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
