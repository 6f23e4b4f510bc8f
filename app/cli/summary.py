"""The one summary every build command prints: what was written, the preflight's errors and
warnings, the verification and quantization errors, the estimate; as text or, with `--json`, as
one JSON object for scripts.

`compile` and `compile-graph` (local or on a server) read it back from the zip they wrote, so a
server's build is summarised exactly as a local one; `model` adds its kit's lines.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.packaging import layout

# Advice is counted, not listed: it never stops a build, and a small kernel has several.
_LISTED = ("error", "warning")


@dataclass
class BuildSummary:
    path: str
    size: int
    details: list[str] = field(default_factory=list)  # command-specific lines (a kit's plan)
    preflight: list[dict[str, Any]] | None = None  # findings as in kernel.json; None: not run
    verification: dict[str, Any] | None = None  # {"passed", "max_rel_error", "tolerance"}
    quantization: dict[str, Any] | None = None  # {"passed", "max_rel_error", "limit"}
    estimate: str | None = None
    server: str | None = None
    passes: str | None = None  # one line: what the graph passes did (kernel.json's passes)

    def counts(self) -> dict[str, int]:
        return {s: sum(f["severity"] == s for f in self.preflight or ()) for s in _SEVERITIES}

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "preflight_counts": self.counts()}


_SEVERITIES = ("error", "warning", "advice")


def summary_of_zip(
    path: str | Path, *, estimate: str | None = None, server: str | None = None
) -> BuildSummary:
    """The summary of a kernel zip the service wrote (kernel.json and verification.json)."""
    path = Path(path)
    kernel, report = _read_reports(path)
    verification = quantization = None
    if report is not None:
        verification = _worst(report, "passed")
        quantization = _quantization(report)
    notes = [f"note: {n}" for n in kernel.get("compiler", {}).get("notes", [])]
    return BuildSummary(
        str(path),
        path.stat().st_size,
        details=notes,
        preflight=kernel.get("preflight"),
        verification=verification,
        quantization=quantization,
        estimate=estimate,
        server=server,
        passes=passes_line(kernel.get("passes")),
    )


def passes_line(report: dict[str, Any] | None) -> str | None:
    """`passes default: 14 ops -> 6 (fuse_conv_bias -3, divide_to_multiply -1+1, ...)`: the
    ops before and after, and each pass that changed something with the ops it removed and
    added (the same pass run twice counted once)."""
    if not report:
        return None
    net: dict[str, list[int]] = {}
    how: dict[str, str] = {}  # what a pass did that removed and added nothing
    for change in report.get("changes", []):
        counts = net.setdefault(change["pass"], [0, 0])
        counts[0] += sum(len(v) for v in change.get("removed", {}).values())
        counts[1] += sum(len(v) for v in change.get("added", {}).values())
        how.setdefault(change["pass"], "rewired" if change.get("rewired") else "reordered")
    pipeline = report.get("pipeline")
    named = pipeline if isinstance(pipeline, str) else "custom"
    done = ", ".join(
        f"{name} -{r}" + (f"+{a}" if a else "") if r or a else f"{name} {how[name]}"
        for name, (r, a) in net.items()
    )
    line = f"passes {named}: {report.get('ops_before')} ops -> {report.get('ops_after')}"
    return f"{line} ({done})" if done else f"{line} (nothing to change)"


def _read_reports(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            kernel = json.loads(z.read(layout.KERNEL_JSON)) if layout.KERNEL_JSON in names else {}
            report = (
                json.loads(z.read(layout.VERIFICATION_JSON))
                if layout.VERIFICATION_JSON in names
                else None
            )
    except (OSError, zipfile.BadZipFile, ValueError):
        return {}, None  # not a kernel zip: nothing more to say than its size
    return kernel, report


def _reports(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A verification report per function (a multi-function package holds one each)."""
    return list(report["functions"].values()) if "functions" in report else [report]


def _worst(report: dict[str, Any], passed_key: str) -> dict[str, Any]:
    """Pass or fail, and the largest relative error against its tolerance."""
    outputs = [
        o
        for r in _reports(report)
        for o in {**r.get("outputs", {}), **r.get("states", {})}.values()
    ]
    worst: dict[str, Any] = max(outputs, key=lambda o: o.get("max_rel_error", 0.0), default={})
    return {
        "passed": bool(report.get(passed_key)),
        "max_rel_error": worst.get("max_rel_error"),
        "tolerance": worst.get("tolerance"),
    }


def _quantization(report: dict[str, Any]) -> dict[str, Any] | None:
    sections = [r["quantization"] for r in _reports(report) if "quantization" in r]
    if not sections:
        return None
    worst = max(sections, key=lambda q: q.get("max_rel_error") or 0.0)
    return {
        "passed": all(q.get("passed", True) for q in sections),
        "max_rel_error": worst.get("max_rel_error"),
        "limit": worst.get("limit"),
    }


def render(summary: BuildSummary) -> str:
    where = f" from {summary.server}" if summary.server else ""
    lines = [f"wrote {summary.path} ({summary.size} bytes){where}", *summary.details]
    if summary.passes:
        lines.append(summary.passes)
    if summary.preflight is not None:
        counts = summary.counts()
        lines.append("preflight: " + " ".join(f"{s}={counts[s]}" for s in _SEVERITIES))
    lines += _grouped_findings(summary.preflight or [])
    if (v := summary.verification) is not None:
        lines.append(
            f"verify: {'passed' if v['passed'] else 'FAILED'}: max_rel_error "
            f"{v['max_rel_error']} (tolerance {v['tolerance']})"
        )
    if (q := summary.quantization) is not None:
        verdict = (
            "no limit asked (max_quantization_error)"
            if q["limit"] is None
            else f"{'within' if q['passed'] else 'OVER'} limit {q['limit']}"
        )
        lines.append(
            f"quantize: {verdict}: max_rel_error {q['max_rel_error']} against the "
            "unquantized weights"
        )
    if summary.estimate:
        lines.append(f"estimate: {summary.estimate}")
    return "\n".join(lines)


def _grouped_findings(findings: list[dict[str, Any]]) -> list[str]:
    """One line per rule that raised an error or a warning: where (the first few nodes) and its
    first message, which says what to change; kernel.json keeps every finding."""
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        if f["severity"] in _LISTED:
            by_rule.setdefault(f["rule"], []).append(f)
    lines = []
    for rule, hits in sorted(by_rule.items(), key=lambda kv: _LISTED.index(kv[1][0]["severity"])):
        nodes = ", ".join(h["node"] for h in hits[:3]) + (", ..." if len(hits) > 3 else "")
        lines.append(f"  {hits[0]['severity']} {rule} x{len(hits)} ({nodes}): {hits[0]['message']}")
    return lines


def emit(summary: BuildSummary, as_json: bool) -> None:
    print(json.dumps(summary.to_json(), indent=2, sort_keys=True) if as_json else render(summary))
