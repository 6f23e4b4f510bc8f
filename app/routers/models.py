"""POST /v1/models: a model kit from a checkpoint uploaded as blobs, built as a job (poll
GET /v1/jobs/{id}: a stage per program; GET /v1/jobs/{id}/artifact: the kit)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends

from app.api.context import Services, services
from app.api.openapi import problems
from app.errors import ErrorKind, RequestError
from app.kits.job import ModelRequest
from app.schemas.kits import ModelJob

router = APIRouter(prefix="/v1", tags=["models"])


@router.post(
    "/models",
    status_code=202,
    summary="Build a model kit from a checkpoint's uploaded files (a job)",
    responses={
        202: {"description": "The job as it stands; poll GET /v1/jobs/{id}"},
        **problems(400, 401, 404, 422, 503),
    },
)
async def submit_model(body: ModelJob, svc: Services = Depends(services)) -> dict[str, Any]:
    options = body.model_dump(exclude={"files"}, exclude_defaults=True)
    request = ModelRequest.create(body.files, options)
    for name, digest in request.files.items():
        if await asyncio.to_thread(svc.blobs.file, digest) is None:
            raise RequestError(f"files.{name}", f"no blob {digest}: upload the file with "
                               "/v1/blobs/uploads first", kind=ErrorKind.NOT_FOUND,
                               title="Unknown blob")  # fmt: skip
    return (await svc.jobs.submit(request)).public()
