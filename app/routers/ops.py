"""GET /v1/ops: the op catalog, and the MIL primitives graph nodes may use."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from app.api.openapi import problems
from app.catalog_info import catalog, primitive_catalog
from app.schemas.wire import OpInfo, PrimitiveInfo

router = APIRouter(prefix="/v1", tags=["catalog"])


@cache
def _listed(kind: str) -> list[dict[str, Any]]:  # fixed for the life of the process
    ops = catalog() if kind in ("op", "all") else []
    return ops + (primitive_catalog() if kind in ("primitive", "all") else [])


@router.get(
    "/ops",
    summary="The op catalog (and the primitives graph nodes may use)",
    response_model=list[OpInfo | PrimitiveInfo],
    response_model_by_alias=True,
    responses=problems(401, 422),
)
async def list_ops(
    kind: Annotated[
        Literal["op", "primitive", "all"],
        Query(description="op: the catalog; primitive: MIL primitives for graph nodes; all"),
    ] = "op",
) -> list[dict[str, Any]]:
    return _listed(kind)
