"""The body of POST /v1/models: a checkpoint's files by blob digest and the options
`ane-kernels model` takes (docs/kits.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.plans import MAX_CONTEXT


class ModelJob(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    files: dict[str, str] = Field(
        description="the checkpoint folder's files by name, each the digest of a blob uploaded "
        "with /v1/blobs/uploads: config.json, the safetensors file(s) (and their index), the "
        "tokenizer files (config.json among them)",
    )
    format: Literal["mlpackage", "mlmodelc", "mil"] = Field("mlpackage", description="--format")
    context: int | None = Field(None, ge=1, le=MAX_CONTEXT, description="--context")
    prefill: int | None = Field(
        None, ge=1, le=MAX_CONTEXT, description="--prefill: tokens per prefill call"
    )
    device: str | None = Field(
        None,
        description="--device: a device name (GET /v1/devices); none: the envelope every chip "
        "takes",
    )
    quantize: dict[str, Any] | str | None = Field(
        None,
        description='--quantize: one config for layers and head, {"layers": …, "head": …} (a '
        'part may be "auto"), or "auto": the lightest setting that passes max_kl / min_top1',
    )
    kv: Literal["io", "state"] = Field("io", description="--kv")
    verify: bool = Field(False, description="--verify")
    strict: bool = Field(
        False,
        description="--strict: refuse (422, `quantize`) a quantization reported failing on the "
        "device and path, or one the planner cannot model, instead of warning in kit.json",
    )
    max_kl: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="--max-kl: the quality gate's most mean KL divergence from the checkpoint",
    )
    min_top1: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="--min-top1: the quality gate's least top-1 agreement with the checkpoint",
    )


class DeviceCheck(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kit: str = Field(
        max_length=64, description="the id of the POST /v1/models job whose kit to check"
    )
    device: str = Field(description="the chip of the macOS worker, as GET /v1/devices names it")
    prompt_ids: list[int] | None = Field(
        None, max_length=4096, description="the prompt (default: six fixed tokens)"
    )
    max_new_tokens: int = Field(8, ge=1, le=4096, description="tokens to generate and time")
