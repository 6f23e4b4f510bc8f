"""What `plan` and `model` share on the command line: the layout's options (one name, meaning
and default each: app/planner/layout.py) and the lines that describe a plan."""

from __future__ import annotations

import json

from app.planner import DEFAULT_CONTEXT, DEFAULT_PREFILL
from app.planner.layout import MAX_LIVE_FUNCTIONS


def add_layout_options(parser) -> None:
    """The options `plan` and `model` share, with the same names, meanings and defaults (the
    one layout: app/planner/layout.py)."""
    parser.add_argument(
        "--context",
        type=int,
        help=f"positions the KV cache holds (default min({DEFAULT_CONTEXT}, "
        "max_position_embeddings))",
    )
    parser.add_argument(
        "--prefill",
        type=int,
        help=f"tokens per prefill call; divides the context (default min({DEFAULT_PREFILL}, "
        "context))",
    )
    parser.add_argument(
        "--device",
        help="the device to lay out for (ane-kernels devices; product names too): its "
        "per-program envelope and axis limit, and the prediction for it (default: the envelope "
        "every chip takes, no prediction)",
    )
    parser.add_argument(
        "--kv",
        choices=["io", "state"],
        default="io",
        help="KV cache as inputs/outputs (io, every target) or ios18 state",
    )
    parser.add_argument(
        "--quantize",
        metavar="JSON",
        help='a quantize config for the layers and the head, or {"layers": ..., "head": ...} '
        '(a part left out stays fp16); model also takes "auto", or a part "auto": the lightest '
        "setting that passes --max-kl / --min-top1",
    )


def plan_lines(plan: dict) -> list[str]:
    """The plan in a few lines for a person: the layout, and for a device the prediction."""
    gib = 1 << 30
    programs = plan["programs"]
    lines = [
        f"{plan['device'] or 'no device'} ({plan['path']}), {plan['precision']}, context "
        f"{plan['context']}, prefill chunks of {plan['prefill']}, prompt {plan['prompt']}",
        f"envelope: {plan['envelope']}",
        f"programs: {len(programs)} ({', '.join(p['name'] for p in programs)}), "
        f"{plan['functions']} compiled functions loaded at once (at most {MAX_LIVE_FUNCTIONS} "
        "measured live)",
        f"head: {plan['head']['programs']} piece{'s' if plan['head']['programs'] > 1 else ''}, "
        f"{plan['head']['rule']}",
    ]
    if plan["decode_tokens_per_s"] is None:
        why = "name a device (--device)" if plan["device"] is None else "see the warnings"
        lines.append(
            f"weights: {plan['weight_bytes'] / gib:.2f} GiB with the embedding table; "
            f"no prediction: {why}"
        )
    else:
        lines += [
            f"decode:  {plan['decode_tokens_per_s']} tok/s (range "
            f"{plan['decode_tokens_per_s_range'][0]}-{plan['decode_tokens_per_s_range'][1]}, "
            f"{plan['decode_bound']}-bound)",
            f"prefill: {plan['prefill_tokens_per_s']} tok/s (range "
            f"{plan['prefill_tokens_per_s_range'][0]}-{plan['prefill_tokens_per_s_range'][1]})",
            f"memory:  {plan['peak_memory_bytes'] / gib:.2f} GiB peak of "
            f"{plan['app_memory_bytes'] / gib:.2f} GiB an app may use; first load "
            f"{plan['first_load_bytes'] / gib:.2f} GiB",
        ]
    if plan["fits"]:
        lines.append("fits")
    else:
        lines += [f"does not fit: {p['message']}" for p in plan["problems"]]
        fit = plan["fits_with"] or {}
        if fit.get("quantize") is not None:
            where = f" at a context of {fit['context']}" if "context" in fit else ""
            lines.append(
                f"fits with --quantize '{json.dumps(fit['quantize'])}'{where} "
                f"({fit['decode_tokens_per_s']} tok/s)"
            )
        elif fit.get("message"):
            lines.append(fit["message"])
    return lines


def warning_line(warning: dict) -> str:
    return (
        f"warning {warning['rule']} ({warning['part']}): {warning['message']} [{warning['source']}]"
    )


def describe_plan(plan: dict) -> str:
    """The plan's lines and its warnings."""
    return "\n".join(plan_lines(plan) + [warning_line(w) for w in plan.get("warnings", ())])
