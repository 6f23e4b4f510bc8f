"""A plan for running a decoder-only model: the kit's layout (app/planner/layout.py, the one
`ane-kernels model` builds) and, for a chip, what it predicts.

    plan = make_plan(config, "a18-pro", quantize={"mode": "palettize", "nbits": 4})
    plan.to_json()["decode_tokens_per_s"], plan.fits, plan.problems, plan.warnings

What it predicts (app/devices: the roofline model and its calibrated efficiencies): prefill and
decode tokens per second, each with a range, peak memory and first-load size; what does not fit,
naming the limit, by how much, and the lightest quantization that would fit; and what the
quantization asked for costs in honesty: a setting the field reports failing on the chip and
path, or one the planner cannot model, is a warning (`--strict` refuses the kit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.devices import Chip
from app.devices.calibration import fitted
from app.devices.estimate_model import RANGE, chain_seconds, roofline
from app.devices.llm import (
    FP16_BYTES,
    DecoderShape,
    Grouping,
    Precision,
    decode_works,
    prefill_works,
)
from app.errors import ErrorKind, RequestError
from app.estimates import device_or_error, path_or_error
from app.planner.honesty import STRICT_RULES, findings, modelled, warnings_of
from app.planner.layout import Layout, lay_out
from app.planner.lengths import DEFAULT_CONTEXT, DEFAULT_PREFILL, DEFAULT_PROMPT
from app.planner.parts import TARGET
from app.planner.shape import precision_of, shape_from_config
from app.preflight import PATHS as REPORT_PATHS
from app.preflight import Status, quantization_status

__all__ = ["DEFAULT_CONTEXT", "DEFAULT_PREFILL", "DEFAULT_PROMPT", "Plan", "make_plan"]

# What one plan may model, checked before any of it is computed: one dispatch per layer program
# per prefill chunk (a 405B-class model on an iPhone's 1 GiB envelope with a prompt of 131,072
# tokens in chunks of 64 needs about 260,000).
MAX_DISPATCHES = 1 << 19
# Tried in order when a plan does not fit: the lightest compression that fits is named.
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
class Prediction:
    decode_s: float
    decode_bound: str
    prefill_s: float


@dataclass(frozen=True)
class Plan:
    config: Mapping[str, Any] = field(repr=False)
    layout: Layout
    chip: Chip | None
    path: str
    shape: DecoderShape
    prompt: int
    precisions: tuple[Precision | None, Precision | None]  # layers, head; None: not modelled
    prediction: Prediction | None
    problems: tuple[Problem, ...]
    warnings: tuple[dict[str, Any], ...]
    fits_with: dict[str, Any] | None = None

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def context(self) -> int:
        return self.layout.context

    @property
    def weight_bytes(self) -> int:
        """What the app loads: every program's weight.bin and the embedding table."""
        return self.layout.weight_bytes + self.layout.embedding_bytes

    @property
    def kv_cache_bytes(self) -> int:
        return self.shape.layers * self.shape.kv_bytes(self.layout.context)

    @property
    def activation_bytes(self) -> int:
        """A prefill chunk's widest activations (the MLP's) in and out, and the logits."""
        chunk, shape = self.layout.prefill, self.shape
        return 2 * chunk * max(shape.hidden, shape.intermediate) * FP16_BYTES * 2 + (
            shape.vocab * FP16_BYTES
        )

    @property
    def peak_memory_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes

    @property
    def precision_name(self) -> str:
        layers, head = (p.describe() for p in (self.layout.layers, self.layout.head))
        return layers if layers == head else f"{layers} layers, {head} head"

    def strict_refusals(self) -> list[dict[str, Any]]:
        return [w for w in self.warnings if w["rule"] in STRICT_RULES]

    def check_strict(self) -> None:
        """`--strict`: refuse a quantization reported failing on the path, or not modelled."""
        refused = self.strict_refusals()
        if refused:
            raise RequestError(
                "quantize",
                "refused (strict): " + "; ".join(f"{w['part']}: {w['message']}" for w in refused),
                title="Quantization not honest to promise",
            )

    def to_json(self) -> dict:
        layout = self.layout
        p = self.prediction
        out: dict[str, Any] = {
            "device": self.chip.name if self.chip is not None else None,
            "path": self.path,
            "envelope": layout.envelope.describe(),
            "precision": self.precision_name,
            "precisions": layout.to_json()["precision"],
            "quantize": layout.to_json()["quantize"],
            "context": layout.context,
            "prefill": layout.prefill,
            "prompt": self.prompt,
            "kv": layout.kv,
            "model": {
                "layers": self.shape.layers,
                "hidden_size": self.shape.hidden,
                "intermediate_size": self.shape.intermediate,
                "vocab_size": self.shape.vocab,
                "params": self.shape.params,
                "tied_head": self.shape.tied,
            },
            "programs": [p.to_json() for p in layout.programs],
            "head": {
                "programs": len(layout.heads),
                "rule": layout.head_rule,
                "axis_max": layout.envelope.axis_max,
            },
            "max_program_weight_bytes": layout.envelope.budget,
            "functions": layout.functions,
            "fits": self.fits,
            "problems": [pr.to_json() for pr in self.problems],
            "fits_with": self.fits_with,
            "warnings": list(self.warnings),
            "weight_bytes": self.weight_bytes,
            "weight_bytes_exact": layout.exact,
            "embedding_bytes": layout.embedding_bytes,
            "first_load_bytes": self.weight_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "peak_memory_bytes": self.peak_memory_bytes,
            "app_memory_bytes": self.chip.app_memory_bytes if self.chip is not None else None,
            "quantization_reports": self.quantization_reports(),
        }
        if p is None:
            return out | dict.fromkeys(
                (
                    "decode_tokens_per_s",
                    "decode_tokens_per_s_range",
                    "decode_bound",
                    "prefill_tokens_per_s",
                    "prefill_tokens_per_s_range",
                    "efficiency",
                    "device_facts",
                )
            )
        assert self.chip is not None
        decode, prefill = 1 / p.decode_s, self.prompt / p.prefill_s
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
        return out | {
            "decode_tokens_per_s": round(decode, 2),
            "decode_tokens_per_s_range": [round(decode / RANGE, 2), round(decode * RANGE, 2)],
            "decode_bound": p.decode_bound,
            "prefill_tokens_per_s": round(prefill, 1),
            "prefill_tokens_per_s_range": [round(prefill / RANGE, 1), round(prefill * RANGE, 1)],
            "efficiency": vars(fitted().efficiency(self.path, self.chip.generation)),
            "device_facts": facts,
        }

    def quantization_reports(self) -> list[dict]:
        """What the field reports for each quantized part on this chip family (any chip, with no
        device) and path (the preflight's quantization table): failures and slowdowns, with
        their sources, the node naming the part."""
        return [f.to_json() for f in findings(self.layout, self.chip, self.path)]


def _problems(plan: Plan) -> list[Problem]:
    layout, shape, chip = plan.layout, plan.shape, plan.chip
    problems, envelope = [], layout.envelope
    if layout.layer_bytes > envelope.budget:
        problems.append(
            Problem(
                "program_weight_bytes",
                f"one decoder layer holds {layout.layer_bytes:,} bytes at "
                f"{layout.layers.describe()}, over the {envelope.budget:,} one program may hold "
                f"{'on ' + envelope.device if envelope.device else 'by default'} by "
                f"{layout.layer_bytes - envelope.budget:,}: no split into whole layers fits",
                layout.layer_bytes - envelope.budget,
            )
        )
    for key, size, cap in layout.over_caps:
        problems.append(
            Problem(
                "axis_max",
                f"{key} {size:,} is over the decoder ops' parameter cap of {cap:,} by "
                f"{size - cap:,}: no kit of this config builds",
                size - cap,
            )
        )
    capped = {key for key, _, _ in layout.over_caps}
    axis, where = envelope.axis_max, envelope.device or "every chip"
    for key, size in (("hidden_size", shape.hidden), ("intermediate_size", shape.intermediate)):
        if size > axis and key not in capped:
            problems.append(
                Problem(
                    "axis_max",
                    f"{key} {size:,} is over {where}'s largest axis of {axis:,} by {size - axis:,}",
                    size - axis,
                )
            )
    if chip is not None and plan.peak_memory_bytes > chip.app_memory_bytes:
        budget, peak = chip.app_memory_bytes, plan.peak_memory_bytes
        problems.append(
            Problem(
                "app_memory_bytes",
                f"the plan needs {peak:,} bytes at {plan.precision_name}, over the {budget:,} an "
                f"app may use on {chip.name} ({chip.app_memory_share.value:.2f} of "
                f"{chip.ram_bytes.value:,}) by {peak - budget:,}",
                peak - budget,
            )
        )
    return problems


def _predict(
    layout: Layout,
    shape: DecoderShape,
    chip: Chip,
    path: str,
    precisions: tuple[Precision, Precision],
    prompt: int,
) -> Prediction:
    layers, head = precisions
    heads = len(layout.heads)
    grouping = Grouping(tuple(len(p.rows) for p in layout.decoders), heads, heads)
    eff = fitted().efficiency(path, chip.generation)
    decode = decode_works(shape, layers, chip, grouping, layout.context, head)
    bound = max(decode, key=lambda w: w.bytes)  # the heaviest program decides the bound
    chunk = layout.prefill
    prefill = prefill_works(shape, layers, chip, grouping, prompt, chunk, head)
    return Prediction(
        chain_seconds(chip, decode, eff),
        roofline(chip, bound, eff).bound,
        chain_seconds(chip, prefill, eff),
    )


def _plan(config: Mapping[str, Any], layout: Layout, path: str, prompt: int) -> Plan:
    shape = shape_from_config(config)
    chip = device_or_error(layout.envelope.device) if layout.envelope.device else None
    precisions = (modelled(layout.layers), modelled(layout.head))
    prediction = None
    if chip is not None and precisions[0] is not None and precisions[1] is not None:
        prediction = _predict(layout, shape, chip, path, (precisions[0], precisions[1]), prompt)
    warnings = warnings_of(layout, chip, path, precisions)
    plan = Plan(config, layout, chip, path, shape, prompt, precisions, prediction, (), ())
    return replace(plan, problems=tuple(_problems(plan)), warnings=tuple(warnings))


def _prompt(prompt: int | None, context: int) -> int:
    if prompt is None:
        return min(DEFAULT_PROMPT, context)
    if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt < 1:
        raise RequestError("prompt", f"must be a positive integer, not {prompt!r}")
    if prompt > context:
        raise RequestError(
            "prompt", f"a prompt of {prompt} tokens does not fit a context of {context}"
        )
    return prompt


def make_plan(
    config: Mapping[str, Any],
    device: str | None = None,
    *,
    quantize: Mapping[str, Any] | str | None = None,
    context: int | None = None,
    prefill: int | None = None,
    prompt: int | None = None,
    kv: str = "io",
    path: str = "coreml",
    max_program_weight_bytes: int | None = None,
) -> Plan:
    """The plan of the kit `ane-kernels model` builds with the same options: `prefill` is the
    tokens per prefill call, `prompt` the prompt the prefill speed is predicted for (default
    min(512, context))."""
    path = path_or_error(path)
    layout = lay_out(
        config,
        device=device,
        quantize=quantize,
        context=context,
        prefill=prefill,
        kv=kv,
        max_program_weight_bytes=max_program_weight_bytes,
    )
    prompt = _prompt(prompt, layout.context)
    _check_cost(layout, prompt)
    plan = _plan(config, layout, path, prompt)
    if plan.fits or plan.chip is None:
        return plan
    return replace(plan, fits_with=_lightest_fit(plan))


def _check_cost(layout: Layout, prompt: int) -> None:
    """Refuse a plan over MAX_DISPATCHES modelled dispatches, naming what makes it so."""
    layers, chunk = len(layout.decoders), layout.prefill
    chunks = -(-prompt // chunk)
    if layers * chunks > MAX_DISPATCHES:
        raise RequestError(
            "prompt",
            f"a prompt of {prompt:,} tokens is {chunks:,} chunks of {chunk} through "
            f"{layers:,} layer programs: {layers * chunks:,} dispatches, over the planner's "
            f"limit of {MAX_DISPATCHES:,}; plan a shorter prompt or longer chunks",
            kind=ErrorKind.TOO_LARGE,
            limit=MAX_DISPATCHES,
        )


def _reported_failing(candidate: Mapping[str, Any], chip: Chip, path: str) -> bool:
    if path not in REPORT_PATHS:
        return False
    status = quantization_status(candidate, chip.report_family, path, target=TARGET)
    return status is Status.REPORTED_FAILING


def _again(plan: Plan, **options: Any) -> Plan:
    layout = plan.layout
    chosen: dict[str, Any] = {
        "device": layout.envelope.device,
        "quantize": options.get("quantize", plan.layout.layers.quantize),
        "context": layout.context,
        "prefill": layout.prefill,
        "kv": layout.kv,
        "max_program_weight_bytes": layout.envelope.budget,
    } | options
    other = lay_out(plan.config, **chosen)
    return _plan(plan.config, other, plan.path, min(plan.prompt, other.context))


def _lightest_fit(plan: Plan) -> dict[str, Any]:
    """The first candidate lighter than the plan's own precision that fits (skipping any the
    field reports failing on this chip and path), or why none does."""
    assert plan.chip is not None
    tried = []
    bits = max((p.bits if p is not None else 16) for p in plan.precisions)
    for candidate in CANDIDATES:
        precision = precision_of(candidate)
        if precision.bits >= bits or _reported_failing(candidate, plan.chip, plan.path):
            continue
        other = _again(plan, quantize=candidate)
        if other.fits:
            assert other.prediction is not None
            return {
                "quantize": candidate,
                "precision": precision.name,
                "decode_tokens_per_s": round(1 / other.prediction.decode_s, 2),
                "peak_memory_bytes": other.peak_memory_bytes,
            }
        tried.append((candidate, other))
    if not tried:
        return {"quantize": None, "message": "no lighter quantization to try"}
    candidate, last = tried[-1]
    over = "; ".join(p.message for p in last.problems)
    shorter = _shorter_context(last, candidate)
    if shorter is None or shorter.prediction is None:
        return {
            "quantize": None,
            "message": f"no quantization down to {last.precision_name} fits: {over}",
            "lightest_tried": candidate,
        }
    return {
        "quantize": candidate,
        "precision": last.precision_name,
        "context": shorter.context,
        "decode_tokens_per_s": round(1 / shorter.prediction.decode_s, 2),
        "peak_memory_bytes": shorter.peak_memory_bytes,
        "message": f"no quantization fits a context of {last.context}: {over}; "
        f"{last.precision_name} fits a context of {shorter.context}",
    }


def _shorter_context(plan: Plan, quantize: Mapping[str, Any]) -> Plan | None:
    """The plan at the longest halved context (down to the prompt, at least 256) that fits, when
    only memory is over."""
    if any(p.limit != "app_memory_bytes" for p in plan.problems):
        return None
    context = plan.context // 2
    while context >= max(plan.prompt, 256):
        chunk = plan.layout.prefill
        while context % chunk:
            chunk //= 2
        other = _again(plan, quantize=quantize, context=context, prefill=chunk)
        if other.fits:
            return other
        context //= 2
    return None
