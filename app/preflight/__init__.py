"""ANE preflight: checks of a built MIL program against the limits the Apple Neural Engine is
reported to have, run before the program is packaged.

    from app.preflight import preflight, first_error, summary_header
    findings = preflight(program)                      # list[Finding], in program order
    kernel_json["preflight"] = findings_to_json(findings)
    headers["X-ANE-Preflight"] = summary_header(findings)
    if strict and (error := first_error(findings)):    # strict mode is the caller's
        ...  # answer 422 naming error.node

Every rule and every number comes from ../shared/research/ (mil-text-and-blob.md §(e),
fused-quantized-mlmodelc.md §2.4 and §3); `RULES` holds the table, each row with its source.
`quantization_findings` reads a quantization config (issue 15) against the per-format report
table `REPORTS`. Nothing here raises on a finding: what to refuse is the caller's decision.
"""

from app.preflight.findings import (
    Finding,
    Severity,
    findings_to_json,
    first_error,
    summary_header,
)
from app.preflight.options import (
    DEFAULT_MAX_PROGRAM_WEIGHT_BYTES,
    HARD_MAX_PROGRAM_WEIGHT_BYTES,
    PreflightOptions,
)
from app.preflight.quant_config import QuantFormat, read_config
from app.preflight.quantization import (
    CHIP_FAMILIES,
    PATHS,
    REPORTS,
    QuantReport,
    Status,
    quantization_findings,
    quantization_reports,
    quantization_status,
    render_quantization_markdown,
)
from app.preflight.rules import RULES, RULES_BY_ID, Rule, preflight, render_rules_markdown

__all__ = [
    "CHIP_FAMILIES",
    "DEFAULT_MAX_PROGRAM_WEIGHT_BYTES",
    "HARD_MAX_PROGRAM_WEIGHT_BYTES",
    "PATHS",
    "REPORTS",
    "RULES",
    "RULES_BY_ID",
    "Finding",
    "PreflightOptions",
    "QuantFormat",
    "QuantReport",
    "Rule",
    "Severity",
    "Status",
    "findings_to_json",
    "first_error",
    "preflight",
    "quantization_findings",
    "quantization_reports",
    "quantization_status",
    "read_config",
    "render_quantization_markdown",
    "render_rules_markdown",
    "summary_header",
]
