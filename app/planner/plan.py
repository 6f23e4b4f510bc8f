"""A plan for running a decoder-only model on one chip, from its config.json alone.

    plan = make_plan(config, "a18-pro", quantize={"mode": "palettize", "nbits": 4})
    plan.to_json()["decode_tokens_per_s"], plan.fits, plan.problems

What it decides: how whole layers group into programs under the chip's per-program envelope,
how the head is split (programs for the envelope, tiles for the chip's largest axis); what it
predicts (app/devices: the roofline model and its calibrated efficiencies): prefill and decode
tokens per second, each with a range, peak memory and first-load size; and what does not fit,
naming the limit, by how much, and the lightest quantization that would fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.devices import Chip
from app.devices.calibration import fitted
from app.devices.llm import (
    FP16_BYTES,
    DecoderShape,
    Grouping,
    Precision,
    decode_works,
    group_layers,
    prefill_works,
)
from app.devices.model import RANGE, chain_seconds, roofline
from app.errors import ErrorKind, RequestError
from app.estimates import device_or_error, path_or_error
from app.planner.shape import precision_of, shape_from_config
from app.preflight import PATHS as REPORT_PATHS
from app.preflight import Status, quantization_findings, quantization_status

DEFAULT_CONTEXT = 2048
DEFAULT_PREFILL = 512
# Positions per prefill dispatch: the sequence length of the published Core ML prefill
# measurement (FluidInference/mobius #77, docs/calibration.md).
PREFILL_CHUNK = 128
# Tried in order when a plan does not fit: the lightest compression that fits is named.
# What one plan may model, checked before any of it is computed: a plan lists every program and
# models one dispatch per layer program per prefill chunk, so a small config of absurd sizes
# (4,096 layers, every size 2^24: 266,240 programs, 25 MB of answer, 48 s) is refused up front.
# A 405B-class model (126 layers, a 4.2 GB head) on an iPhone's 1 GiB envelope with a prompt of
# 131,072 tokens needs 130 programs and 129,028 dispatches.
MAX_PROGRAMS = 4096
MAX_DISPATCHES = 1 << 17
CANDIDATES: tuple[dict[str, Any], ...] = (
    {"mode": "linear", "dtype": "int8", "granularity": "per_channel"},
    {"mode": "palettize", "nbits": 6},
    {"mode": "palettize", "nbits": 4},
)


@dataclass(frozen=True)
class Problem:
    limit: str  # "program_weight_bytes" | "app_memory_bytes" | "axis_max"
    message: str
    over_by: int

    def to_json(self) -> dict:
        return {"limit": self.limit, "message": self.message, "over_by": self.over_by}


@dataclass(frozen=True)
class Plan:
    chip: Chip
    path: str
    shape: DecoderShape
    precision: Precision
    quantize: Mapping[str, Any] | None
    context: int
    prefill: int
    grouping: Grouping
    decode_s: float
    decode_bound: str
    prefill_s: float
    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    problems: tuple[Problem, ...]
    fits_with: dict[str, Any] | None = field(default=None)

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def peak_memory_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes

    def programs_json(self) -> list[dict]:
        out, first = [], 0
        layer_bytes = self.precision.stored_bytes(self.shape.layer_params)
        for count in self.grouping.layer_groups:
            out.append(
                {
                    "name": f"layers_{first}_{first + count - 1}",
                    "layers": [first, first + count - 1],
                    "weight_bytes": int(layer_bytes * count),
                }
            )
            first += count
        vocab, parts = self.shape.vocab, self.grouping.head_programs
        for i in range(parts):
            lo, hi = vocab * i // parts, vocab * (i + 1) // parts
            out.append(
                {
                    "name": f"head_{i}",
                    "vocab": [lo, hi],
                    "weight_bytes": int(self.precision.stored_bytes((hi - lo) * self.shape.hidden)),
                    "tiles": -(-self.grouping.head_tiles // parts),
                }
            )
        return out

    def quantization_reports(self) -> list[dict]:
        """What the field reports for this quantization on this chip family and path (the
        preflight's quantization table): failures and slowdowns, with their sources."""
        if self.quantize is None or self.path not in REPORT_PATHS:
            return []
        findings = quantization_findings(
            self.quantize, self.chip.report_family, path=self.path, node="weights"
        )
        return [f.to_json() for f in findings]

    def to_json(self) -> dict:
        decode = 1 / self.decode_s
        prefill = self.prefill / self.prefill_s
        eff = fitted()
        facts = {
            name: {"value": f.value, "provenance": f.mark(), "source": f.source}
            for name, f in self.chip.facts().items()
            if name
            in (
                "peak_tflops",
                "bandwidth_gbs",
                "floor_us",
                "program_weight_bytes",
                "ram_bytes",
                "app_memory_share",
            )
        }
        return {
            "device": self.chip.name,
            "path": self.path,
            "precision": self.precision.name,
            "quantize": dict(self.quantize) if self.quantize is not None else None,
            "context": self.context,
            "prefill": self.prefill,
            "model": {
                "layers": self.shape.layers,
                "hidden_size": self.shape.hidden,
                "intermediate_size": self.shape.intermediate,
                "vocab_size": self.shape.vocab,
                "params": self.shape.params,
                "tied_head": self.shape.tied,
            },
            "programs": self.programs_json(),
            "head": {
                "programs": self.grouping.head_programs,
                "tiles": self.grouping.head_tiles,
                "axis_max": self.chip.axis_max.value,
            },
            "fits": self.fits,
            "problems": [p.to_json() for p in self.problems],
            "fits_with": self.fits_with,
            "decode_tokens_per_s": round(decode, 2),
            "decode_tokens_per_s_range": [round(decode / RANGE, 2), round(decode * RANGE, 2)],
            "decode_bound": self.decode_bound,
            "prefill_tokens_per_s": round(prefill, 1),
            "prefill_tokens_per_s_range": [round(prefill / RANGE, 1), round(prefill * RANGE, 1)],
            "peak_memory_bytes": self.peak_memory_bytes,
            "first_load_bytes": self.weight_bytes,
            "weight_bytes": self.weight_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "app_memory_bytes": self.chip.app_memory_bytes,
            "efficiency": vars(eff.efficiency(self.path, self.chip.generation)),
            "quantization_reports": self.quantization_reports(),
            "device_facts": facts,
        }


def _positive(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestError(name, f"must be a positive integer, not {value!r}")
    return value


def _problems(shape: DecoderShape, precision: Precision, chip: Chip, peak: int) -> list[Problem]:
    problems = []
    envelope = chip.program_weight_bytes.value
    layer = int(precision.stored_bytes(shape.layer_params))
    if layer > envelope:
        problems.append(
            Problem(
                "program_weight_bytes",
                f"one decoder layer holds {layer:,} bytes at {precision.name}, over the "
                f"{envelope:,} one program may hold on {chip.name} by {layer - envelope:,}: no "
                "split into whole layers fits",
                layer - envelope,
            )
        )
    axis = chip.axis_max.value
    for key, size in (("hidden_size", shape.hidden), ("intermediate_size", shape.intermediate)):
        if size > axis:
            problems.append(
                Problem(
                    "axis_max",
                    f"{key} {size:,} is over {chip.name}'s largest axis of {axis:,} by "
                    f"{size - axis:,}",
                    size - axis,
                )
            )
    budget = chip.app_memory_bytes
    if peak > budget:
        problems.append(
            Problem(
                "app_memory_bytes",
                f"the plan needs {peak:,} bytes at {precision.name}, over the {budget:,} an app may "
                f"use on {chip.name} ({chip.app_memory_share.value:.2f} of "
                f"{chip.ram_bytes.value:,}) by {peak - budget:,}",
                peak - budget,
            )
        )
    return problems


def _plan(
    shape: DecoderShape,
    chip: Chip,
    path: str,
    precision: Precision,
    quantize: Mapping[str, Any] | None,
    context: int,
    prefill: int,
) -> Plan:
    grouping = group_layers(shape, precision, chip)
    eff = fitted().efficiency(path, chip.generation)
    decode = decode_works(shape, precision, chip, grouping, context)
    bound = max(decode, key=lambda w: w.bytes)  # the heaviest program decides the bound
    chunk = min(prefill, PREFILL_CHUNK)
    prefill_s = chain_seconds(
        chip, prefill_works(shape, precision, chip, grouping, prefill, chunk), eff
    )
    weights = int(precision.stored_bytes(shape.params))
    kv = shape.layers * shape.kv_bytes(context)
    # a prefill chunk's widest activations (the MLP's) in and out, and the logits
    activations = 2 * chunk * max(shape.hidden, shape.intermediate) * FP16_BYTES * 2 + (
        shape.vocab * FP16_BYTES
    )
    problems = _problems(shape, precision, chip, weights + kv + activations)
    return Plan(
        chip,
        path,
        shape,
        precision,
        quantize,
        context,
        prefill,
        grouping,
        chain_seconds(chip, decode, eff),
        roofline(chip, bound, eff).bound,
        prefill_s,
        weights,
        kv,
        activations,
        tuple(problems),
    )


def make_plan(
    config: Mapping[str, Any],
    device: str,
    *,
    quantize: Mapping[str, Any] | None = None,
    context: int = DEFAULT_CONTEXT,
    prefill: int = DEFAULT_PREFILL,
    path: str = "coreml",
) -> Plan:
    chip = device_or_error(device)
    path = path_or_error(path)
    context, prefill = _positive(context, "context"), _positive(prefill, "prefill")
    if prefill > context:
        raise RequestError(
            "prefill", f"a prompt of {prefill} tokens does not fit a context of {context}"
        )
    shape = shape_from_config(config)
    precision = precision_of(quantize)
    _check_cost(group_layers(shape, precision, chip), prefill)
    plan = _plan(shape, chip, path, precision, quantize, context, prefill)
    if plan.fits:
        return plan
    return Plan(**{**vars(plan), "fits_with": _lightest_fit(plan)})


def _check_cost(grouping: Grouping, prefill: int) -> None:
    """Refuse a plan over MAX_PROGRAMS programs or MAX_DISPATCHES modelled dispatches, naming
    what makes it so, before any of it is computed (lighter candidates only need fewer)."""
    layers, head = len(grouping.layer_groups), grouping.head_programs
    if head > MAX_PROGRAMS:
        raise RequestError(
            "config.vocab_size",
            f"the head (vocab_size x hidden_size) would need {head:,} programs, over the "
            f"planner's limit of {MAX_PROGRAMS:,}",
            kind=ErrorKind.TOO_LARGE,
            limit=MAX_PROGRAMS,
        )
    if layers + head > MAX_PROGRAMS:
        raise RequestError(
            "config.num_hidden_layers",
            f"the plan would need {layers + head:,} programs ({layers:,} of layers, {head:,} of "
            f"the head), over the planner's limit of {MAX_PROGRAMS:,}",
            kind=ErrorKind.TOO_LARGE,
            limit=MAX_PROGRAMS,
        )
    chunks = -(-prefill // PREFILL_CHUNK)
    if layers * chunks > MAX_DISPATCHES:
        raise RequestError(
            "prefill",
            f"a prompt of {prefill:,} tokens is {chunks:,} chunks of {PREFILL_CHUNK} through "
            f"{layers:,} layer programs: {layers * chunks:,} dispatches, over the planner's "
            f"limit of {MAX_DISPATCHES:,}; plan a shorter prompt",
            kind=ErrorKind.TOO_LARGE,
            limit=MAX_DISPATCHES,
        )


def _reported_failing(candidate: Mapping[str, Any], chip: Chip, path: str) -> bool:
    if path not in REPORT_PATHS:
        return False
    status = quantization_status(candidate, chip.report_family, path)
    return status is Status.REPORTED_FAILING


def _lightest_fit(plan: Plan) -> dict[str, Any]:
    """The first candidate lighter than the plan's own precision that fits (skipping any the
    field reports failing on this chip and path), or why none does."""
    tried = []
    for candidate in CANDIDATES:
        precision = precision_of(candidate)
        if precision.bits >= plan.precision.bits or _reported_failing(
            candidate, plan.chip, plan.path
        ):
            continue
        other = _plan(
            plan.shape, plan.chip, plan.path, precision, candidate, plan.context, plan.prefill
        )
        if other.fits:
            return {
                "quantize": candidate,
                "precision": precision.name,
                "decode_tokens_per_s": round(1 / other.decode_s, 2),
                "peak_memory_bytes": other.peak_memory_bytes,
            }
        tried.append((candidate, other))
    if not tried:
        return {"quantize": None, "message": "no lighter quantization to try"}
    candidate, last = tried[-1]
    over = "; ".join(p.message for p in last.problems)
    shorter = _shorter_context(last)
    if shorter is None:
        return {
            "quantize": None,
            "message": f"no quantization down to {last.precision.name} fits: {over}",
            "lightest_tried": candidate,
        }
    return {
        "quantize": candidate,
        "precision": last.precision.name,
        "context": shorter.context,
        "decode_tokens_per_s": round(1 / shorter.decode_s, 2),
        "peak_memory_bytes": shorter.peak_memory_bytes,
        "message": f"no quantization fits a context of {last.context}: {over}; "
        f"{last.precision.name} fits a context of {shorter.context}",
    }


def _shorter_context(plan: Plan) -> Plan | None:
    """The plan at the longest halved context (down to the prompt, at least 256) that fits, when
    only memory is over."""
    if any(p.limit != "app_memory_bytes" for p in plan.problems):
        return None
    context = plan.context // 2
    while context >= max(plan.prefill, 256):
        other = _plan(
            plan.shape,
            plan.chip,
            plan.path,
            plan.precision,
            plan.quantize,
            context,
            min(plan.prefill, context),
        )
        if other.fits:
            return other
        context //= 2
    return None
