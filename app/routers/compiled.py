"""Synchronous `.mlmodelc` requests: POST /v1/kernels with format=mlmodelc runs as a job.

The compile happens wherever the job engine runs it (this machine's compiler, or a macOS worker
of the farm). The request waits up to `ANE_SYNC_WAIT_S`; a compile that takes longer answers 202
with the job, so the client follows it at /v1/jobs/{id} instead of holding a connection open.
"""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.responses import FileResponse, JSONResponse

from app.jobs.model import JobState
from app.jobs.spec import from_kernel_job
from app.service.context import Services
from app.service.intake import lasting
from app.service.kernels import MEDIA_TYPE
from app.service.problems import Problem

# How a failed job reads as an HTTP answer: the request, the compiler, or the machine at fault.
_FAILURE_STATUS = {"spec": 422, "compiler": 422, "timeout": 504, "unavailable": 503}


async def serve_compiled(request: Request, svc: Services, kernel_job, etag_matches) -> Response:
    spec = from_kernel_job(await lasting(kernel_job, svc))
    before = await svc.jobs.get(spec.key())
    job = await svc.jobs.submit(spec)
    job = await svc.jobs.wait(job.id, svc.settings.sync_wait_s) or job
    request.state.op = kernel_job.op
    if job.state == JobState.succeeded:
        path = await svc.jobs.artifact_path(job)
        assert job.artifact is not None
        if path is not None:
            cached = (
                before is not None and before.state == JobState.succeeded and before.run == job.run
            )
            request.state.cache = "hit" if cached else "miss"
            etag = f'"{job.artifact.digest}"'
            headers = {"ETag": etag, "X-Cache": request.state.cache, "Cache-Control": "no-cache"}
            if etag_matches(request.headers.get("if-none-match"), etag):
                return Response(status_code=304, headers=headers)
            return FileResponse(
                path, media_type=MEDIA_TYPE, filename=job.artifact.filename, headers=headers
            )
    if job.state in (JobState.failed, JobState.cancelled):
        error = job.error
        kind = error.kind if error else "cancelled"
        raise Problem(
            _FAILURE_STATUS.get(kind, 409 if kind == "cancelled" else 500),
            error.message if error else f"job {job.id} was cancelled",
            title="Compile failed" if kind == "compiler" else f"Job {kind}",
            field=error.field if error else None,
            job=job.id,
        )
    # Still queued or compiling (or succeeded but evicted meanwhile): follow the job.
    return JSONResponse(job.public(), status_code=202, headers={"Location": f"/v1/jobs/{job.id}"})
