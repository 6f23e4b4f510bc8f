"""The findings a quantization config earns from the field's reports.

The reports themselves (format x chip family x path, each with its source) are the device
table's: app/devices/quant_reports.py. The reports conflict chip by chip. Nothing is averaged
away: a config earns a warning for every row that reports it failing or slower, and the message
names the rows that say it works.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.devices.quant_reports import (
    ANY,
    CHIP_FAMILIES,
    NO_REPORT_SOURCE,
    PATHS,
    RANK,
    REPORTS,
    F,
    QuantReport,
    Status,
)
from app.language.targets import DEFAULT_TARGET
from app.preflight.findings import Finding, Severity
from app.preflight.quant_config import QuantFormat, read_config
from app.quantize import QuantizeConfig, QuantizeConfigError

__all__ = ["CHIP_FAMILIES", "PATHS", "REPORTS", "QuantReport", "Status"]


def _check_selection(chip: str, path: str | None) -> tuple[str, ...]:
    if chip != ANY and chip not in CHIP_FAMILIES:
        raise QuantizeConfigError(
            "chip", f"{chip!r} is not one of {ANY}, {', '.join(CHIP_FAMILIES)}"
        )
    if path is not None and path not in PATHS:
        raise QuantizeConfigError("path", f"{path!r} is not one of {', '.join(PATHS)}")
    return (path,) if path else PATHS


def quantization_reports(
    config: Mapping[str, Any] | QuantizeConfig,
    chip: str = ANY,
    *,
    target: str = DEFAULT_TARGET,
    path: str | None = None,
) -> list[QuantReport]:
    """The reports that cover this config on `chip` ("any": every family) and `path` (None:
    both), in table order."""
    return _covering(read_config(config, target), chip, _check_selection(chip, path))


def _covering(fmt: QuantFormat, chip: str, paths: tuple[str, ...]) -> list[QuantReport]:
    return [r for r in REPORTS if r.path in paths and r.covers(chip) and r.formats.matches(fmt)]


def quantization_status(
    config: Mapping[str, Any] | QuantizeConfig,
    chip: str,
    path: str,
    *,
    target: str = DEFAULT_TARGET,
) -> Status | None:
    """The worst status any report gives for this config, chip and path; None if none covers it."""
    reports = quantization_reports(config, chip, target=target, path=path)
    return max((r.status for r in reports), key=RANK.__getitem__, default=None)


def quantization_findings(
    config: Mapping[str, Any] | QuantizeConfig,
    chip: str = ANY,
    *,
    target: str = DEFAULT_TARGET,
    path: str | None = None,
    node: str = "weight",
) -> list[Finding]:
    """Findings to warn with for a weight quantized by `config` (`node` names the weight or the
    graph node): one per report of it failing or slower, advice where no report covers a path."""
    paths = _check_selection(chip, path)
    fmt = read_config(config, target)
    reports = _covering(fmt, chip, paths)
    where = "any chip" if chip == ANY else chip
    findings: list[Finding] = []
    for p in paths:
        rows = [r for r in reports if r.path == p]
        if not rows:
            findings.append(
                Finding(
                    "quant.no-report",
                    Severity.ADVICE,
                    node,
                    f"{fmt.describe()} ({fmt.op}) on the {p} path, {where}: no public report "
                    "either way; check ANE placement on a device before relying on it",
                    NO_REPORT_SOURCE,
                )
            )
            continue
        working = [r for r in rows if r.status is Status.WORKS]
        contra = (
            "; reported working by " + "; ".join(f"{r.source} ({r.chips()})" for r in working)
            if working
            else ""
        )
        for r in rows:
            if r.status is Status.WORKS:
                continue
            rule = "quant.reported-failing" if r.status is F else "quant.slower"
            verb = "reported failing" if r.status is F else "reported slower"
            findings.append(
                Finding(
                    rule,
                    Severity.WARNING,
                    node,
                    f"{fmt.describe()} ({fmt.op}) on the {p} path, {where}: {verb} on "
                    f"{r.chips()}: {r.note}{contra}",
                    r.source,
                )
            )
    return findings


def render_quantization_markdown(reports: tuple[QuantReport, ...] = REPORTS) -> str:
    """The report table of docs/quantization.md: format | chips | path | status | reported | source."""
    lines = [
        "| format | chips | path | status | reported | source |",
        "|---|---|---|---|---|---|",
    ]
    for r in reports:
        chips = ", ".join(r.families) if r.families else ANY
        cells = (r.formats.describe(), chips, r.path, r.status.value, r.note, r.source)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
