"""POST /v1/graphs: a graph of catalog ops and MIL primitives in, ONE program's zip out (cached,
single-flight, as for kernels)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.api.answers import artifact_response, estimate_devices
from app.api.context import services_of
from app.api.intake import incoming_kernel
from app.api.openapi import BYPASS_PARAMETER, DEVICE_PARAMETER, GRAPH_BODY, KERNEL_RESPONSES
from app.graphs.spec import GRAPH_OP
from app.routers.kernels import bypass

router = APIRouter(prefix="/v1", tags=["graphs"])


@router.post(
    "/graphs",
    summary="Build a graph into one program",
    response_class=Response,
    responses=KERNEL_RESPONSES,
    openapi_extra={**GRAPH_BODY, "parameters": [BYPASS_PARAMETER, DEVICE_PARAMETER]},
)
async def build_graph(request: Request) -> Response:
    svc = services_of(request)
    request.state.op = GRAPH_OP
    devices = estimate_devices(request)
    async with incoming_kernel(request, svc, GRAPH_OP, bypass(request)) as incoming:
        answer = await svc.kernels.answer(incoming)
    return artifact_response(answer, request, devices)
