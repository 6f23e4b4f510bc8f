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


# -- the answer: app/planner's Plan.to_json, typed for the OpenAPI document ---------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanShape(_Strict):
    layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    params: int = Field(description="parameters of the whole model")
    tied_head: bool = Field(description="the head shares the embedding table")


class PlanProgram(_Strict):
    name: str = Field(description="layers_<first>_<last> or head_<i>")
    layers: list[int] | None = Field(None, description="first and last decoder layer it holds")
    vocab: list[int] | None = Field(None, description="the head's rows it computes: [start, end)")
    weight_bytes: int = Field(description="its weights at the plan's precision")
    tiles: int | None = Field(None, description="a head program's tiles along the device's axis")


class PlanHead(_Strict):
    programs: int
    tiles: int = Field(description="pieces of the vocabulary axis, each within `axis_max`")
    axis_max: int = Field(description="the device's largest tensor axis")


class PlanProblem(_Strict):
    limit: Literal["program_weight_bytes", "app_memory_bytes", "axis_max"]
    message: str
    over_by: int = Field(description="by how much, in the limit's unit")


class PlanFact(_Strict):
    value: float | int | bool
    provenance: str = Field(description="measured, specified, extrapolated from ..., assumed")
    source: str = Field(description="a source key of GET /v1/devices (docs/devices.md)")


class PlanFinding(_Strict):
    rule: str
    severity: str
    node: str
    message: str
    source: str


class PlanEfficiency(_Strict):
    compute: float = Field(
        description="e_compute: the share of the fp16 peak programs reach, calibrated on measured "
        "rows (above 1 where Apple's rating understates it)"
    )
    memory: float = Field(description="e_memory: the share of the ANE's bandwidth they reach")


class PlanAnswer(_Strict):
    """How a model runs on a device (docs/preflight.md, docs/calibration.md)."""

    device: str = Field(description="the chip planned for, as GET /v1/devices names it")
    path: str
    precision: str = Field(description="fp16, int8 or palettized (e.g. lut4)")
    quantize: dict[str, Any] | None
    context: int
    prefill: int
    model: PlanShape
    programs: list[PlanProgram] = Field(description="the decoder's programs, then the head's")
    head: PlanHead
    fits: bool
    problems: list[PlanProblem] = Field(description="every limit the plan is over")
    fits_with: dict[str, Any] | None = Field(
        description="when it does not fit: the lightest quantization that does, or why none does"
    )
    decode_tokens_per_s: float
    decode_tokens_per_s_range: list[float] = Field(description="low and high: the model's range")
    decode_bound: str = Field(description="memory or compute: what a decode step waits on")
    prefill_tokens_per_s: float
    prefill_tokens_per_s_range: list[float]
    peak_memory_bytes: int = Field(description="weights, KV cache and activations")
    first_load_bytes: int
    weight_bytes: int
    kv_cache_bytes: int
    app_memory_bytes: int = Field(description="what the device lets an app use")
    efficiency: PlanEfficiency = Field(
        description="the calibration's efficiencies for this path and ANE generation, which "
        "scale the roofline's peak and bandwidth (docs/calibration.md)"
    )
    quantization_reports: list[PlanFinding] = Field(
        description="what the field reports for this quantization on this chip (failures, "
        "slowdowns), with sources"
    )
    device_facts: dict[str, PlanFact] = Field(description="the device table's numbers it used")
