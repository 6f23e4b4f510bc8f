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
    device: str | None = Field(
        None,
        description="a device name, e.g. m4 or a18-pro (GET /v1/devices); none: the envelope "
        "every chip takes, and no prediction",
    )
    quantize: dict[str, Any] | None = Field(
        None,
        description='the weights\' quantization, e.g. {"mode": "palettize", "nbits": 4}, for the '
        'layers and the head, or {"layers": ..., "head": ...}',
    )
    context: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTEXT,
        description="the KV cache length (default min(512, max_position_embeddings))",
    )
    prefill: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTEXT,
        description="tokens per prefill call, dividing the context (default min(64, context))",
    )
    prompt: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTEXT,
        description="the prompt the prefill speed is predicted for (default min(512, context))",
    )
    kv: Literal["io", "state"] = Field(
        "io", description="the KV cache as inputs/outputs (io) or ios18 states"
    )
    path: Literal["coreml", "ane-direct", "coreai"] = Field(
        "coreml", description="the runtime path the model runs through"
    )
    strict: bool = Field(
        False,
        description="refuse (422, `quantize`) a quantization reported failing or not modelled, "
        "as a kit built with strict would be",
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
    name: str = Field(description="decoder_<k> or head_<k>, as the kit names its programs")
    role: Literal["decoder", "head"]
    layers: list[int] | None = Field(None, description="first and last decoder layer it holds")
    vocab: list[int] | None = Field(None, description="the head's rows it computes: [start, end)")
    weight_bytes: int = Field(description="the bytes its weight.bin holds, headers aside")
    functions: list[str] = Field(description="its compiled functions: prefill and decode, or main")


class PlanHead(_Strict):
    programs: int
    rule: str = Field(
        description="rows per piece and what sets them: the ops' 16,384 parameter cap, the "
        "chip's axis limit or the per-program envelope"
    )
    axis_max: int = Field(description="the device's largest tensor axis")


class PlanWarning(_Strict):
    rule: str = Field(
        description="quant.reported-failing, quant.not-modelled (both refused with strict) or "
        "kit.live-functions"
    )
    part: str = Field(description="layers, head, layers and head, or kit")
    message: str
    source: str


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
    """The kit `ane-kernels model` builds with the same options, and on a device how it runs
    (docs/preflight.md, docs/calibration.md)."""

    device: str | None = Field(description="the chip planned for, as GET /v1/devices names it")
    path: str
    envelope: str = Field(description="the per-program weight bytes and axis limit laid out for")
    precision: str = Field(description="fp16, 4-bit palettized, linear int8 per_channel, ...")
    precisions: dict[str, str] = Field(description="the layers' and the head's")
    quantize: dict[str, Any] = Field(description="the layers' and the head's configs")
    context: int
    prefill: int = Field(description="tokens per prefill call")
    prompt: int = Field(description="the prompt the prefill speed is predicted for")
    kv: str
    model: PlanShape
    programs: list[PlanProgram] = Field(description="the decoder's programs, then the head's")
    head: PlanHead
    max_program_weight_bytes: int
    functions: int = Field(description="compiled functions the kit loads at once")
    fits: bool
    problems: list[PlanProblem] = Field(description="every limit the plan is over")
    fits_with: dict[str, Any] | None = Field(
        description="when it does not fit: the lightest quantization that does, or why none does"
    )
    warnings: list[PlanWarning]
    weight_bytes: int = Field(description="the programs' weights and the fp16 embedding table")
    weight_bytes_exact: bool = Field(description="false where pruning makes them an estimate")
    embedding_bytes: int
    first_load_bytes: int
    kv_cache_bytes: int
    peak_memory_bytes: int = Field(description="weights, KV cache and activations")
    app_memory_bytes: int | None = Field(description="what the device lets an app use")
    quantization_reports: list[PlanFinding] = Field(
        description="what the field reports for this quantization on this chip (failures, "
        "slowdowns), with sources"
    )
    decode_tokens_per_s: float | None = Field(description="none without a device")
    decode_tokens_per_s_range: list[float] | None = Field(
        description="low and high: the model's range"
    )
    decode_bound: str | None = Field(description="memory or compute: what a decode step waits on")
    prefill_tokens_per_s: float | None
    prefill_tokens_per_s_range: list[float] | None
    efficiency: PlanEfficiency | None = Field(
        description="the calibration's efficiencies for this path and ANE generation, which "
        "scale the roofline's peak and bandwidth (docs/calibration.md)"
    )
    device_facts: dict[str, PlanFact] | None = Field(
        description="the device table's numbers it used"
    )
