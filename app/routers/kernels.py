"""POST /v1/kernels and /v1/kernels/{op}: a kernel request in, a zip out (cached, single-flight)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import TypeAdapter, ValidationError

from app.api.answers import artifact_response, estimate_devices
from app.api.context import services_of
from app.api.intake import incoming_kernel
from app.api.openapi import (
    BYPASS_PARAMETER,
    DEVICE_PARAMETER,
    KERNEL_BODY,
    KERNEL_RESPONSES,
    OP_PARAMETER,
)
from app.api.problems import from_validation_errors

router = APIRouter(prefix="/v1", tags=["kernels"])
_BOOL = TypeAdapter(bool)


def bypass(request: Request) -> bool:
    value = request.query_params.get("bypass_cache")
    if value is None:
        return False
    try:
        return _BOOL.validate_python(value)
    except ValidationError as exc:  # the same problem FastAPI's own check would give
        errors = [{**e, "loc": ("query", "bypass_cache")} for e in exc.errors()]
        raise from_validation_errors(errors) from None


@router.post(
    "/kernels/{op}",
    summary="Build a kernel (op in the path)",
    response_class=Response,
    responses=KERNEL_RESPONSES,
    openapi_extra={**KERNEL_BODY, "parameters": [OP_PARAMETER, BYPASS_PARAMETER, DEVICE_PARAMETER]},
)
async def build_kernel_for_op(request: Request) -> Response:
    op = request.path_params["op"]
    request.state.op = op
    return await _answer(request, op)


@router.post(
    "/kernels",
    summary="Build a kernel (op in the body)",
    response_class=Response,
    responses=KERNEL_RESPONSES,
    openapi_extra={**KERNEL_BODY, "parameters": [BYPASS_PARAMETER, DEVICE_PARAMETER]},
)
async def build_kernel(request: Request) -> Response:
    return await _answer(request, None)


async def _answer(request: Request, op: str | None) -> Response:
    svc = services_of(request)
    devices = estimate_devices(request)
    async with incoming_kernel(request, svc, op, bypass(request)) as incoming:
        answer = await svc.kernels.answer(incoming)
    return artifact_response(answer, request, devices)
