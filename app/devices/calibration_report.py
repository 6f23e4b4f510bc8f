"""The calibration as Markdown blocks for docs/calibration.md (app/devices/render.py fills them)."""

from __future__ import annotations

from app.devices.calibration import EXCLUDED, fitted, leave_one_out
from app.devices.estimate_model import COMPUTE, MEMORY, PATHS, RAMP_EXPONENT, RAMP_FLOPS, RANGE
from app.devices.markdown import table


def _chip(name: str | None) -> str:
    return f"`{name}`" if name else "not named"


def _value(value: float) -> str:
    return f"{value:,.3g}" if value < 100 else f"{value:,.0f}"


def model_formula() -> str:
    """The model's equations as a fenced text block, with the constants app/devices/estimate_model.py
    computes with (a fence names its language: the docs tests refuse one that does not)."""
    ramp_flops = f"{RAMP_FLOPS:.1e}".replace("e+", "e")
    return (
        "```text\n"
        "t = floor + max(FLOPs / (peak · ramp(FLOPs) · e_compute), bytes / (bandwidth · e_memory))\n"
        f"ramp(FLOPs) = min(1, (FLOPs / {ramp_flops}) ^ {RAMP_EXPONENT:g})\n"
        f"range = [t / {RANGE:g}, t · {RANGE:g}]\n"
        "```\n"
    )


def calibration_table() -> str:
    rows = [
        [
            c.row.id,
            c.row.model,
            _chip(c.row.chip),
            c.row.precision,
            c.row.path,
            c.row.metric,
            _value(c.row.measured),
            _value(c.predicted),
            f"{c.ratio:.2f}",
            c.bound,
            c.group,
            f"`{c.row.source}`",
            c.row.note,
        ]
        for c in leave_one_out()
    ]
    header = [
        "row",
        "model",
        "chip",
        "precision",
        "path",
        "metric",
        "measured",
        "predicted (leave-one-out)",
        "time ratio",
        "bound",
        "efficiency from",
        "source",
        "note",
    ]
    return table(header, rows)


def excluded_table() -> str:
    rows = [
        [
            r.id,
            r.model,
            _chip(r.chip),
            r.precision,
            r.path,
            f"{_value(r.measured)} {r.metric}",
            f"`{r.source}`",
            r.excluded,
        ]
        for r in EXCLUDED
    ]
    return table(
        ["row", "model", "chip", "precision", "path", "measured", "source", "why excluded"], rows
    )


def model_table() -> str:
    fit = fitted()
    rows = []
    for (side, path, generation), value in sorted(fit.groups.items(), key=str):
        group = (
            "every path"
            if path is None
            else (path if generation is None else f"{path}, {generation} generation")
        )
        rows.append([side, group, f"{value:.3f}"])
    unfitted = [
        p
        for p in PATHS
        if (COMPUTE, p, None) not in fit.groups and (MEMORY, p, None) not in fit.groups
    ]
    for path in unfitted:
        rows.append(["both", path, "no included row: uses every path's"])
    return table(["side", "group", "efficiency"], rows)
