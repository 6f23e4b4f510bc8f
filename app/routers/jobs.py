"""/v1/jobs, /v1/batches, /v1/workers: build jobs a farm can queue, watch, fetch and cancel.

A job is a kernel request (the same body as POST /v1/kernels) run by the job engine: in this
process (no ANE_REDIS_URL) or on `ane-kernels worker` machines (arq + Redis), which is how
`format=mlmodelc` reaches a Mac. The job id is the request's cache key.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import FileResponse

from app.jobs import JobSpec, JobState, from_kernel_job
from app.routers.responses import problems
from app.service.context import Services, services
from app.service.intake import (
    JSON_TYPES,
    MULTIPART,
    job_from_json,
    lasting,
    media_type,
    read_request,
    unsupported_media,
)
from app.service.problems import Problem
from app.uploads.spool import read_small_body

router = APIRouter(prefix="/v1", tags=["jobs"])

MAX_BATCH = 256
JobId = Annotated[str, Path(description="a job id (the request's cache key)")]
JOB_EXAMPLE = {
    "op": "conv",
    "in_channels": 2,
    "out_channels": 2,
    "spatial": 4,
    "format": "mlmodelc",
    "weights": {"weight": [[1.0, 0.0], [0.0, 1.0]]},
}
_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/KernelRequest"},
                        {
                            "type": "object",
                            "required": ["kernels"],
                            "properties": {
                                "kernels": {
                                    "type": "array",
                                    "maxItems": MAX_BATCH,
                                    "items": {"$ref": "#/components/schemas/KernelRequest"},
                                }
                            },
                        },
                    ]
                },
                "examples": {
                    "one": {"summary": "one kernel, compiled", "value": JOB_EXAMPLE},
                    "batch": {
                        "summary": "a batch: one job per kernel",
                        "value": {"kernels": [JOB_EXAMPLE, {**JOB_EXAMPLE, "name": "second"}]},
                    },
                },
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {"spec": {"type": "string"}},
                    "additionalProperties": {"type": "string", "format": "binary"},
                }
            },
        },
    }
}


async def _specs(request: Request, svc: Services) -> tuple[list[JobSpec], bool]:
    """(specs, whether the body was a batch)."""
    kind = media_type(request)
    if kind == MULTIPART:  # one kernel with its weights as file parts
        intake = await read_request(request, svc, None, False)
        try:
            return [from_kernel_job(await lasting(intake.job, svc))], False
        finally:
            if intake.body is not None:
                intake.body.cleanup()
    if kind not in JSON_TYPES:
        raise unsupported_media(kind, ["application/json", MULTIPART])
    raw = await read_small_body(request, svc.settings.max_json_bytes)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Problem(400, f"the body is not valid JSON: {exc}", title="Malformed JSON") from None
    if not (isinstance(data, dict) and "kernels" in data):
        return [from_kernel_job(await job_from_json(raw, svc, None, False))], False
    kernels = data["kernels"]
    if (
        set(data) != {"kernels"}
        or not isinstance(kernels, list)
        or not 1 <= len(kernels) <= MAX_BATCH
    ):
        raise Problem(
            422,
            f'a batch is {{"kernels": [...]}} with 1 to {MAX_BATCH} kernel requests',
            title="Invalid batch",
            field="kernels",
        )
    specs = []
    for i, item in enumerate(kernels):
        try:
            job = await job_from_json(json.dumps(item).encode(), svc, None, False)
        except Problem as exc:
            field = f"kernels.{i}" + (f".{exc.field}" if exc.field else "")
            raise Problem(
                exc.status, f"kernels[{i}]: {exc.detail}", title=exc.title, field=field
            ) from None
        specs.append(from_kernel_job(job))
    return specs, True


@router.post(
    "/jobs",
    status_code=202,
    summary="Queue a build job (or a batch of them)",
    openapi_extra=_BODY,
    responses={
        202: {"description": "The job (or the batch) as it stands; poll GET /v1/jobs/{id}"},
        **problems(400, 401, 404, 413, 415, 422, 503),
    },
)
async def submit(request: Request, svc: Services = Depends(services)) -> dict[str, Any]:
    specs, batch = await _specs(request, svc)
    if batch:
        return await svc.jobs.submit_batch(specs)
    return (await svc.jobs.submit(specs[0])).public()


@router.get("/jobs", summary="Recent jobs, newest first", responses=problems(401, 422))
async def list_jobs(
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    svc: Services = Depends(services),
) -> dict[str, Any]:
    return {"jobs": [j.public() for j in await svc.jobs.list(limit, state)]}


async def _job(svc: Services, job_id: str):
    job = await svc.jobs.get(job_id)
    if job is None:
        raise Problem(
            404, f"no job {job_id} (unknown, or finished longer ago than ANE_JOB_KEEP_S)",
            title="Unknown job", field="job_id",
        )  # fmt: skip
    return job


@router.get("/jobs/{job_id}", summary="A job's state", responses=problems(401, 404))
async def get_job(job_id: JobId, svc: Services = Depends(services)) -> dict[str, Any]:
    return (await _job(svc, job_id)).public()


@router.delete(
    "/jobs/{job_id}",
    summary="Cancel a job (a finished job stays as it is)",
    responses=problems(401, 404),
)
async def cancel_job(job_id: JobId, svc: Services = Depends(services)) -> dict[str, Any]:
    await _job(svc, job_id)
    job, _ = await svc.jobs.cancel(job_id)
    assert job is not None
    return job.public()


@router.get(
    "/jobs/{job_id}/artifact",
    summary="Download a finished job's zip",
    response_class=Response,
    responses={
        200: {"content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}}},
        **problems(401, 404),
        409: {"description": "The job has not succeeded (yet)"},
    },
)
async def job_artifact(job_id: JobId, svc: Services = Depends(services)) -> Response:
    job = await _job(svc, job_id)
    if job.state != JobState.succeeded:
        raise Problem(
            409, f"job {job_id} is {job.state.value}; its artifact comes when it has succeeded",
            title="No artifact yet", state=job.state.value,
        )  # fmt: skip
    path = await svc.jobs.artifact_path(job)
    if path is None:
        raise Problem(
            404, "the artifact was evicted from the cache; submit the job again to rebuild it",
            title="Artifact evicted",
        )  # fmt: skip
    assert job.artifact is not None
    return FileResponse(
        path,
        media_type="application/zip",
        filename=job.artifact.filename,
        headers={"ETag": f'"{job.artifact.digest}"'},
    )


@router.get("/batches/{batch_id}", summary="A batch and its jobs", responses=problems(401, 404))
async def get_batch(batch_id: str, svc: Services = Depends(services)) -> dict[str, Any]:
    batch = await svc.jobs.get_batch(batch_id)
    if batch is None:
        raise Problem(404, f"no batch {batch_id}", title="Unknown batch", field="batch_id")
    return batch


@router.get("/workers", summary="Workers with a live heartbeat", responses=problems(401))
async def workers(svc: Services = Depends(services)) -> dict[str, Any]:
    return {
        "engine": svc.jobs.name,
        "workers": [w.model_dump(mode="json") for w in await svc.jobs.workers()],
    }
