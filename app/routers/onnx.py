"""POST /v1/onnx: an ONNX model (its files uploaded as blobs, or sent as parts) imported into
ONE program's zip (cached, single-flight, as for kernels; compiled formats as jobs)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.api.answers import artifact_response, estimate_devices
from app.api.context import services_of
from app.api.intake import ParsedIncoming
from app.api.onnx_intake import incoming_onnx
from app.api.openapi import BYPASS_PARAMETER, DEVICE_PARAMETER, KERNEL_RESPONSES
from app.request import ONNX_OP
from app.routers.kernels import bypass
from app.schemas.onnx import OnnxBody

router = APIRouter(prefix="/v1", tags=["onnx"])


@router.post(
    "/onnx",
    summary="Import an ONNX model into one program",
    response_class=Response,
    responses=KERNEL_RESPONSES,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": OnnxBody.model_json_schema()},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "string"}},
                        "additionalProperties": {"type": "string", "format": "binary"},
                    }
                },
            },
        },
        "parameters": [BYPASS_PARAMETER, DEVICE_PARAMETER],
    },
)
async def import_onnx(request: Request) -> Response:
    svc = services_of(request)
    request.state.op = ONNX_OP
    devices = estimate_devices(request)
    async with incoming_onnx(request, svc, bypass(request)) as incoming:
        answer = await svc.kernels.answer(ParsedIncoming(incoming))
    return artifact_response(answer, request, devices)
