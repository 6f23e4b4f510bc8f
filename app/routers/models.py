"""POST /v1/models: a model kit from a checkpoint uploaded as blobs, built as a job (poll
GET /v1/jobs/{id}: a stage per program; GET /v1/jobs/{id}/artifact: the kit). POST
/v1/device-checks: that kit run with Core ML on a macOS worker, the report in the job."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from app.api.context import Services, services
from app.api.examples import DEVICE_CHECK_EXAMPLES, MODEL_EXAMPLES
from app.api.openapi import job_answer, problems
from app.errors import ErrorKind, RequestError
from app.kits.job import DeviceCheckRequest, ModelRequest
from app.kits.limits import kit_limits
from app.schemas.kits import DeviceCheck, ModelJob

router = APIRouter(prefix="/v1", tags=["models"])


@router.post(
    "/models",
    status_code=202,
    summary="Build a model kit from a checkpoint's uploaded files (a job)",
    response_model=None,
    responses={
        202: job_answer("The job as it stands; poll GET /v1/jobs/{id}"),
        **problems(400, 401, 404, 413, 422, 503),
    },
)
async def submit_model(
    body: Annotated[ModelJob, Body(openapi_examples=MODEL_EXAMPLES)],
    svc: Services = Depends(services),
) -> dict[str, Any]:
    options = body.model_dump(exclude={"files"}, exclude_defaults=True)
    request = ModelRequest.create(body.files, options)
    for name, digest in request.files.items():
        if await asyncio.to_thread(svc.blobs.file, digest) is None:
            raise RequestError(
                f"files.{name}",
                f"no blob {digest}: upload the file with /v1/blobs/uploads first",
                kind=ErrorKind.NOT_FOUND,
                title="Unknown blob",
            )
    # Refused here, before anything is queued, when the checkpoint or the kit is over its limit.
    limits = await asyncio.to_thread(kit_limits, request, svc.blobs.file_path, svc.settings)
    return (await svc.jobs.submit(request, limits)).public()


@router.post(
    "/device-checks",
    status_code=202,
    summary="Check a model kit on a macOS worker with Core ML: placement, load and decode times, "
    "tokens and logits against the reference (a job; the report is its `device_check`)",
    response_model=None,
    responses={
        202: job_answer("The job as it stands; poll GET /v1/jobs/{id}"),
        **problems(400, 401, 404, 422, 503),
    },
)
async def submit_device_check(
    body: Annotated[DeviceCheck, Body(openapi_examples=DEVICE_CHECK_EXAMPLES)],
    svc: Services = Depends(services),
) -> dict[str, Any]:
    request = DeviceCheckRequest.create(body.kit, body.device, body.prompt_ids, body.max_new_tokens)
    entry = await asyncio.to_thread(svc.cache.get, request.kit)
    if entry is None or entry.meta.get("kind") != "model_kit":
        raise RequestError(
            "kit",
            f"no kit {request.kit!r}: name a succeeded POST /v1/models job",
            kind=ErrorKind.NOT_FOUND,
            title="Unknown kit",
        )
    if entry.meta.get("format") == "mil":  # whatever runs the check: the docs promise it
        raise RequestError(
            "kit",
            f"kit {request.kit!r} is of format mil: it has no Core ML programs to check; build "
            "it with format mlpackage or mlmodelc",
        )
    return (await svc.jobs.submit(request)).public()
