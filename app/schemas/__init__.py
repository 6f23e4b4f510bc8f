"""Pydantic models shared by the API, the CLI, the OpenAPI schema and the op catalog."""

from app.schemas.params import (
    PARAMS,
    ConvParams,
    GQAExpandParams,
    IdentityParams,
    MatmulParams,
    OpParams,
    ReadStateParams,
    RMSNormParams,
    ScaleParams,
    SDPAParams,
    UpdateStateParams,
)

__all__ = [
    "PARAMS",
    "ConvParams",
    "GQAExpandParams",
    "IdentityParams",
    "MatmulParams",
    "OpParams",
    "RMSNormParams",
    "ReadStateParams",
    "SDPAParams",
    "ScaleParams",
    "UpdateStateParams",
]
