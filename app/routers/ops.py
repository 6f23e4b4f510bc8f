"""GET /v1/ops: the op catalog."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from app.catalog_info import catalog
from app.routers.responses import problems
from app.schemas.requests import OpInfo

router = APIRouter(prefix="/v1", tags=["catalog"])


@cache
def _catalog() -> list[dict[str, Any]]:
    return catalog()  # fixed for the life of the process


@router.get("/ops", summary="The op catalog", response_model=list[OpInfo], responses=problems(401))
async def list_ops() -> list[dict[str, Any]]:
    return _catalog()
