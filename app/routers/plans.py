"""GET /v1/devices, POST /v1/plan, GET /v1/estimate: the device table, a checkpoint's plan from
its config.json (app/planner), and a cached artifact's estimate per device (app/estimates)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query

from app.api.context import Services, services
from app.api.examples import PLAN_EXAMPLES
from app.api.openapi import problems
from app.devices import CHIPS
from app.errors import ErrorKind, FieldError
from app.estimates import devices_or_error, estimate_works, works_from_json
from app.planner import make_plan
from app.schemas.plans import PlanAnswer, PlanRequest

router = APIRouter(prefix="/v1", tags=["devices"])


@router.get(
    "/devices",
    summary="The Apple chips the service knows, each number sourced",
    responses=problems(401),
)
async def list_devices() -> list[dict[str, Any]]:
    return [chip.to_json() for chip in CHIPS]


@router.post(
    "/plan",
    summary="Plan a decoder model on a device from its config.json: programs, speed, memory, fit",
    response_model=None,
    responses={
        200: {"description": "The plan", "model": PlanAnswer},
        **problems(400, 401, 422),
    },
)
def plan(  # plain def: FastAPI runs it off the event loop
    body: Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)],
) -> dict[str, Any]:
    plan = make_plan(
        body.config,
        body.device,
        quantize=body.quantize,
        context=body.context,
        prefill=body.prefill,
        prompt=body.prompt,
        kv=body.kv,
        path=body.path,
    )
    if body.strict:
        plan.check_strict()
    return plan.to_json()


@router.get(
    "/estimate",
    summary="A built artifact's estimate per program and device: FLOPs, bytes, latency, fit",
    responses=problems(401, 404, 422),
)
def estimate(
    artifact: Annotated[str, Query(description="the artifact's digest (its ETag)", max_length=200)],
    device: Annotated[
        list[str] | None, Query(description="device names; none: the default set")
    ] = None,
    path: Annotated[Literal["coreml", "ane-direct", "coreai"], Query()] = "coreml",
    svc: Services = Depends(services),
) -> dict[str, Any]:
    chips = devices_or_error(device)
    meta = svc.cache.meta_by_digest(artifact.strip().strip('"'))
    if meta is None:
        raise FieldError(
            "artifact", f"no cached artifact has the digest {artifact!r}", kind=ErrorKind.NOT_FOUND
        )
    work = works_from_json(meta.get("work"))
    if work is None:
        raise FieldError(
            "artifact",
            "this artifact was stored without its programs' work (a "
            "compiled format, or built before estimates): build it again",
            kind=ErrorKind.NOT_FOUND,
        )
    return {"artifact": meta["digest"], **estimate_works(*work, chips, path)}
