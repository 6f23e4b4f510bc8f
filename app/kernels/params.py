"""What every op's parameters share: a frozen, strict pydantic model and the common field types.

Names, types, defaults and limits of parameters are a public contract (the HTTP API, the CLI, the
OpenAPI document and the catalog all show them); each op declares its own model in its module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# 16384 is the largest tensor dimension reported to compile for the ANE.
MAX_DIM = 16384

Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]
IODType = Literal["fp16", "fp32"]


class OpParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
