"""The body of POST /v1/plan: a config.json object and a device, as `ane-kernels plan` takes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Generous bounds (128K positions, past most released models): a plan's cost grows with the
# prompt, one step per prefill chunk.
MAX_CONTEXT = 1 << 17


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    config: dict[str, Any] = Field(description="the model's config.json, as a JSON object")
    device: str = Field(description="a device name, e.g. m4 or a18-pro (GET /v1/devices)")
    quantize: dict[str, Any] | None = Field(
        None, description='the weights\' quantization, e.g. {"mode": "palettize", "nbits": 4}'
    )
    context: int = Field(2048, ge=1, le=MAX_CONTEXT, description="the KV cache length")
    prefill: int = Field(512, ge=1, le=MAX_CONTEXT, description="the prompt length")
    path: Literal["coreml", "ane-direct", "coreai"] = Field(
        "coreml", description="the runtime path the model runs through"
    )
