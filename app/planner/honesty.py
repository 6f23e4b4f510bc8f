"""What a plan says of its own quantization, honestly: what the field reports on the chip and
path (app/preflight's quantization table; any chip, with no device), which settings the planner
cannot model, and the warnings they make (with the layout's own, too many live functions).
`--strict` refuses a kit for `STRICT_RULES`."""

from __future__ import annotations

from typing import Any

from app.devices import Chip
from app.devices.llm import Precision
from app.devices.quant_reports import ANY
from app.errors import RequestError
from app.planner.layout import Layout
from app.planner.parts import TARGET, Part
from app.planner.shape import precision_of
from app.preflight import PATHS as REPORT_PATHS
from app.preflight import quantization_findings

# The warnings `--strict` refuses a kit for: its quantization is reported failing, or unmodelled.
STRICT_RULES = ("quant.reported-failing", "quant.not-modelled")


def findings(layout: Layout, chip: Chip | None, path: str) -> list:
    if path not in REPORT_PATHS:
        return []
    family = chip.report_family if chip is not None else ANY
    parts = {"layers": layout.layers.quantize, "head": layout.head.quantize}
    if parts["layers"] == parts["head"]:
        parts = {"layers and head": parts["layers"]}
    found = []
    for name, quantize in parts.items():
        if quantize is not None:
            found += quantization_findings(quantize, family, path=path, node=name, target=TARGET)
    return found


def modelled(part: Part) -> Precision | None:
    try:
        return precision_of(part.quantize)
    except RequestError:
        return None  # a mode the estimate does not model (linear 4-bit, pruning)


def warnings_of(
    layout: Layout, chip: Chip | None, path: str, precisions: tuple[Precision | None, ...]
) -> list[dict[str, Any]]:
    warnings = list(layout.warnings())
    for finding in findings(layout, chip, path):
        if finding.rule == "quant.reported-failing":
            warnings.append(
                {
                    "rule": finding.rule,
                    "part": finding.node,
                    "message": finding.message,
                    "source": finding.source,
                }
            )
    unmodelled = {
        name: part
        for name, part, precision in zip(
            ("layers", "head"), (layout.layers, layout.head), precisions, strict=True
        )
        if part.quantize is not None and precision is None
    }
    if len(unmodelled) == 2 and layout.layers.quantize == layout.head.quantize:
        unmodelled = {"layers and head": layout.layers}
    for name, part in unmodelled.items():
        warnings.append(
            {
                "rule": "quant.not-modelled",
                "part": name,
                "message": f"{part.describe()} weights ({name}) are not modelled by the "
                "planner (it models fp16, linear 8-bit and palettized weights): no speed is "
                "predicted" + ("" if layout.exact else ", and the weight bytes are an estimate"),
                "source": "app/planner/shape.py",
            }
        )
    return warnings
