"""/v1/jobs, /v1/batches, /v1/workers: build jobs a farm can queue, watch, fetch and cancel.

A job is a kernel request (the same body as POST /v1/kernels) run by the job engine: in this
process (no ANE_REDIS_URL) or on `ane-kernels worker` machines (arq + Redis), which is how
`format=mlmodelc` reaches a Mac. The job id is the request's cache key.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.api.answers import artifact_response
from app.api.context import Services, services
from app.api.intake import job_requests
from app.api.openapi import JOBS_BODY, MAX_BATCH, NOT_MODIFIED, ZIP, problems
from app.api.problems import Problem
from app.jobs.lifecycle import JobState
from app.service.compiled import open_job_artifact

router = APIRouter(prefix="/v1", tags=["jobs"])

JobId = Annotated[str, Path(description="a job id (the request's cache key)")]


@router.post(
    "/jobs",
    status_code=202,
    summary="Queue a build job (or a batch of them)",
    openapi_extra=JOBS_BODY,
    responses={
        202: {"description": "The job (or the batch) as it stands; poll GET /v1/jobs/{id}"},
        **problems(400, 401, 404, 413, 415, 422, 503, 507),
    },
)
async def submit(request: Request, svc: Services = Depends(services)) -> dict[str, Any]:
    requests, batch = await job_requests(request, svc, MAX_BATCH)
    if batch:
        return await svc.jobs.submit_batch(requests)
    return (await svc.jobs.submit(requests[0])).public()


@router.get("/jobs", summary="Recent jobs, newest first", responses=problems(401, 422, 503))
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
            404,
            f"no job {job_id} (unknown, or finished longer ago than ANE_JOB_KEEP_S)",
            title="Unknown job",
            field="job_id",
        )
    return job


@router.get("/jobs/{job_id}", summary="A job's state", responses=problems(401, 404, 503))
async def get_job(job_id: JobId, svc: Services = Depends(services)) -> dict[str, Any]:
    return (await _job(svc, job_id)).public()


@router.delete(
    "/jobs/{job_id}",
    summary="Cancel a job (a finished job stays as it is)",
    responses=problems(401, 404, 503),
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
        200: {"content": {ZIP: {"schema": {"type": "string", "format": "binary"}}}},
        304: NOT_MODIFIED,
        **problems(401, 404, 503),
        409: {"description": "The job has not succeeded (yet)"},
    },
)
async def job_artifact(
    job_id: JobId, request: Request, svc: Services = Depends(services)
) -> Response:
    job = await _job(svc, job_id)
    if job.state != JobState.succeeded:
        raise Problem(
            409,
            f"job {job_id} is {job.state.value}; its artifact comes when it has succeeded",
            title="No artifact yet",
            state=job.state.value,
        )
    path = await svc.jobs.artifact_path(job)
    served = open_job_artifact(job, path) if path is not None else None
    if served is None:
        raise Problem(
            404,
            "the artifact was evicted from the cache; submit the job again to rebuild it",
            title="Artifact evicted",
        )
    return artifact_response(served, request)


@router.get(
    "/batches/{batch_id}", summary="A batch and its jobs", responses=problems(401, 404, 503)
)
async def get_batch(batch_id: str, svc: Services = Depends(services)) -> dict[str, Any]:
    batch = await svc.jobs.get_batch(batch_id)
    if batch is None:
        raise Problem(404, f"no batch {batch_id}", title="Unknown batch", field="batch_id")
    return batch


@router.get("/workers", summary="Workers with a live heartbeat", responses=problems(401, 503))
async def workers(svc: Services = Depends(services)) -> dict[str, Any]:
    return {
        "engine": svc.jobs.name,
        "workers": [w.model_dump(mode="json") for w in await svc.jobs.workers()],
    }
