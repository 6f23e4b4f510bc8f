"""GET /v1/devices and POST /v1/plan: the device table, and a checkpoint's plan from its
config.json (app/planner)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.openapi import problems
from app.devices import CHIPS
from app.planner import make_plan
from app.schemas.plans import PlanRequest

router = APIRouter(prefix="/v1", tags=["devices"])


@router.get("/devices", summary="The Apple chips the service knows, each number sourced",
            responses=problems(401))  # fmt: skip
async def list_devices() -> list[dict[str, Any]]:
    return [chip.to_json() for chip in CHIPS]


@router.post(
    "/plan",
    summary="Plan a decoder model on a device from its config.json: programs, speed, memory, fit",
    responses=problems(400, 401, 422),
)
def plan(body: PlanRequest) -> dict[str, Any]:  # plain def: FastAPI runs it off the event loop
    return make_plan(body.config, body.device, quantize=body.quantize, context=body.context,
                     prefill=body.prefill, path=body.path).to_json()  # fmt: skip
