"""`--quantize auto`: the lightest quantization of each part of a kit that passes the quality
gate's thresholds (app/kits/gate.py), chosen before the kit is built.

The parts are those of the quantize option: the decoder layers' projections and the head. Each
walks the ladder fp16 → int8 → 6-bit → 4-bit → 3-bit → 2-bit palettes, taken as ordered by what
it costs (a lighter rung never measures better): the rungs are bisected, so a part is settled in
three float64 runs rather than six. No program is built while choosing: the float64 reference
runs on the weights each rung decompresses to, the layers once per rung; the head's rungs reuse
the chosen layers' final hidden states, so they cost a head's matrix product each.

The layers are chosen with the head at fp16 (or at its fixed setting), then the head with the
chosen layers, so the pair chosen is the pair measured last.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.errors import RequestError
from app.kits.causal_lm import Model
from app.kits.gate import Prompts, Thresholds, compare, final_hidden, logits
from app.kits.weights import ExactWeights, Fp16Weights, QuantizedWeights, describe
from app.planner.parts import AUTO
from app.quantize import config_json, parse_config

LADDER: tuple[dict[str, Any] | None, ...] = (
    None,
    {"mode": "linear", "dtype": "int8"},
    {"mode": "palettize", "nbits": 6},
    {"mode": "palettize", "nbits": 4},
    {"mode": "palettize", "nbits": 3},
    {"mode": "palettize", "nbits": 2},
)


def auto_parts(quantize: Any) -> tuple[bool, bool] | None:
    """Which parts `quantize` leaves to the ladder, (layers, head); None when it is not auto.
    `"auto"` is both; `{"layers": "auto", "head": cfg}` (or the other way) is one."""
    if quantize == AUTO:
        return True, True
    if isinstance(quantize, Mapping) and set(quantize) <= {"layers", "head"}:
        parts = quantize.get("layers") == AUTO, quantize.get("head") == AUTO
        return parts if any(parts) else None
    return None


Allowed = Callable[[str, "dict[str, Any] | None"], bool]  # (part, rung): may the kit hold it?


@dataclass
class _Walk:
    part: str
    measure: Callable[[dict[str, Any] | None], dict[str, Any]]
    thresholds: Thresholds
    ladder: Sequence[dict[str, Any] | None] = LADDER

    def run(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The lightest passing rung of the ladder (bisected), and every rung tried."""
        tried: list[dict[str, Any]] = []
        passing, failing = -1, len(self.ladder)
        while failing - passing > 1:
            mid = (passing + failing) // 2
            measured = self.measure(self.ladder[mid])
            passed = self.thresholds.passes(measured)
            tried.append({"setting": _name(self.ladder[mid]), **measured, "passed": passed})
            passing, failing = (mid, failing) if passed else (passing, mid)
        if passing < 0:
            raise RequestError(
                "max_kl" if self.thresholds.max_kl is not None else "min_top1",
                f"no setting of the {self.part} passes {self.thresholds.to_json()}, not even "
                f"fp16 (it measures {_brief(tried[-1])} against the checkpoint): loosen it",
            )
        return self.ladder[passing], sorted(tried, key=lambda t: _names().index(t["setting"]))


def _name(config: dict[str, Any] | None) -> str:
    return describe(None if config is None else parse_config(config))


def _names() -> list[str]:
    return [_name(c) for c in LADDER]


def _brief(measured: Mapping[str, Any]) -> str:
    return f"KL {measured['kl_mean']}, top-1 {measured['top1_agreement']}"


def choose(
    model: Model,
    quantize: Any,
    head_rows: Sequence[range],
    prompts: Prompts,
    thresholds: Thresholds,
    say: Callable[[str], None] = lambda message: None,
    allowed: Allowed = lambda part, config: True,
) -> tuple[dict[str, Any], dict[str, Any], np.ndarray]:
    """The quantize option with each auto part replaced by its lightest passing rung, the
    account of what was tried (kit.json's `quantize_auto`), and the checkpoint's logits over the
    prompts (the gate reuses them). A rung `allowed` refuses for a part (`--strict`: reported
    failing on the device and path, or not modelled) is skipped, and the report says so."""
    started = time.perf_counter()
    layers_auto, head_auto = auto_parts(quantize) or (False, False)
    fixed = quantize if isinstance(quantize, Mapping) else {}
    layers_fixed = None if layers_auto else fixed.get("layers")
    head_fixed = None if head_auto else fixed.get("head")
    params = model.stack_params(0, 1, seq_len=1)
    fp16 = Fp16Weights(model, head_rows)
    say("quantize auto: the checkpoint in float64")
    exact = ExactWeights(model, head_rows)
    reference = logits(final_hidden(params, model.num_layers, exact, prompts), exact.head_pieces())

    def weights(layers_q: Any, head_q: Any) -> QuantizedWeights:
        return QuantizedWeights(
            fp16,
            None if layers_q is None else parse_config(layers_q),
            None if head_q is None else parse_config(head_q),
        )

    hidden: dict[int, list[np.ndarray]] = {}

    def layers_rung(config: dict[str, Any] | None) -> dict[str, Any]:
        say(f"quantize auto: layers at {_name(config)}")
        w = weights(config, head_fixed)
        states = final_hidden(params, model.num_layers, w, prompts)
        hidden[LADDER.index(config)] = states
        return compare(logits(states, w.head_pieces()), reference)

    report: dict[str, Any] = {
        "thresholds": thresholds.to_json(),
        "ladder": _names(),
        "measured_against": "the checkpoint in float64 (app/kits/gate.py)",
        "prompts": prompts.to_json(),
    }

    def walk(part: str, measure: Callable[[dict[str, Any] | None], dict[str, Any]]):
        ladder = [c for c in LADDER if allowed(part, c)]
        config, tried = _Walk(part, measure, thresholds, ladder).run()
        report[part] = {"chosen": _name(config), "tried": tried}
        skipped = [_name(c) for c in LADDER if c not in ladder]
        if skipped:
            report[part]["skipped_strict"] = skipped
        return config

    if layers_auto:
        layers_q = walk("layers", layers_rung)
        states = hidden[LADDER.index(layers_q)]
    else:
        layers_q = layers_fixed
        states = final_hidden(params, model.num_layers, weights(layers_q, None), prompts)
    hidden.clear()

    def head_rung(config: dict[str, Any] | None) -> dict[str, Any]:
        say(f"quantize auto: head at {_name(config)}")
        return compare(logits(states, weights(None, config).head_pieces()), reference)

    head_q = head_fixed
    if head_auto:
        head_q = walk("head", head_rung)
    report["seconds"] = round(time.perf_counter() - started, 2)
    resolved = {
        "layers": None if layers_q is None else config_json(parse_config(layers_q)),
        "head": None if head_q is None else config_json(parse_config(head_q)),
    }
    return {k: v for k, v in resolved.items() if v is not None}, report, reference
