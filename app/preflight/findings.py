"""What a preflight check reports: a finding, its JSON form, and the one-line header summary.

A finding names the rule that produced it, how bad it is, the node at fault (an op name, which in
graph programs is the graph's node id, or an input/output name), what to do about it with the
numbers, and where the limit was reported. Severities:

- ``error``: every report agrees the program will not compile or will compute the wrong thing on
  the ANE (a caller's strict mode refuses these);
- ``warning``: reported to fail on some chips, paths or OS versions, or reported by one project
  and contradicted by another;
- ``advice``: it runs, but slower than it could, or a runtime must be told something.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from app.mil import Operation, Var


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    ADVICE = "advice"


SEVERITY_ORDER = (Severity.ERROR, Severity.WARNING, Severity.ADVICE)


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    node: str
    message: str
    source: str

    def to_json(self) -> dict[str, str]:
        """Plain strings only, in the field order `kernel.json` records them."""
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "node": self.node,
            "message": self.message,
            "source": self.source,
        }


@dataclass(frozen=True)
class Hit:
    """What a check function yields: the IR object at fault and the message. The runner adds the
    rule's id, severity and source; `source` here overrides the rule's for table-driven rules
    whose entries each have their own citation."""

    subject: Operation | Var
    message: str
    source: str | None = None


def findings_to_json(findings: Iterable[Finding]) -> list[dict[str, str]]:
    return [f.to_json() for f in findings]


def first_error(findings: Iterable[Finding]) -> Finding | None:
    """The first error in program order, for a caller's strict mode (a 422 naming `node`)."""
    return next((f for f in findings if f.severity is Severity.ERROR), None)


def summary_header(findings: Iterable[Finding]) -> str:
    """One ASCII line for an HTTP header: counts per severity, then the rule ids that fired,
    errors first, each once, e.g. ``error=1 warning=2 advice=0; rules=conv.kernel-max,io.surface-min``.
    """
    findings = list(findings)
    counts = " ".join(f"{s.value}={sum(f.severity is s for f in findings)}" for s in SEVERITY_ORDER)
    ordered = sorted(findings, key=lambda f: SEVERITY_ORDER.index(f.severity))
    rules = list(dict.fromkeys(f.rule for f in ordered))
    return f"{counts}; rules={','.join(rules)}" if rules else counts
