"""The ANE placement report: where Core ML plans to run each op of a compiled kernel.

`MLComputePlan` (macOS 14.4+) is loaded with compute units CPU_AND_NE, so an op that lands on the
CPU does so although the Neural Engine was allowed: that is the "why isn't it on the ANE?" case,
and the summary names every such op in `warnings`. The full per-op report ships as
placement.json in the mlmodelc zip; the summary goes into the job.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

COMPUTE_UNITS = "CPU_AND_NE"
DEVICES = ("ane", "gpu", "cpu")
MIN_MACOS = (14, 4)
# Ops with no device of their own (constants, the program's plumbing): never a warning.
_NO_DEVICE = {"const"}


def unavailable_reason() -> str | None:
    """Why no report can be made on this machine, or None when it can."""
    if sys.platform != "darwin":
        return "MLComputePlan needs macOS 14.4+; this worker runs " + sys.platform
    version = tuple(int(p) for p in (platform.mac_ver()[0] or "0").split(".")[:2])
    if version < MIN_MACOS:
        return f"MLComputePlan needs macOS 14.4+; this is {platform.mac_ver()[0]}"
    try:
        from coremltools.libcoremlpython import _MLComputePlanProxy  # noqa: F401
    except ImportError:
        return "coremltools was installed without its native Core ML module"
    return None


def _device(dev: Any) -> str:
    name = type(dev).__name__
    if "NeuralEngine" in name:
        return "ane"
    if "GPU" in name:
        return "gpu"
    if "CPU" in name:
        return "cpu"
    return name


def load_plan(mlmodelc: Path, function: str = "main") -> list[dict[str, Any]]:
    """Per op of `function`: name (its first output), op type, preferred device, supported
    devices, cost."""
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan

    plan = MLComputePlan.load_from_path(str(mlmodelc), compute_units=ct.ComputeUnit.CPU_AND_NE)
    program = plan.model_structure.program
    if program is None:
        raise ValueError(f"{mlmodelc.name} is not an ML Program")
    ops = []
    for op in program.functions[function].block.operations:
        usage = plan.get_compute_device_usage_for_mlprogram_operation(op)
        cost = plan.get_estimated_cost_for_mlprogram_operation(op)
        ops.append(
            {
                "name": op.outputs[0].name if op.outputs else "",
                "op": op.operator_name,
                "preferred": _device(usage.preferred_compute_device) if usage else None,
                "supported": sorted(_device(d) for d in usage.supported_compute_devices)
                if usage
                else [],
                "cost": cost.weight if cost else None,
            }
        )
    return ops


def summarize(ops: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts per device and a warning for each op Core ML did not put on the Neural Engine."""
    counts = dict.fromkeys(DEVICES, 0)
    counts["unplaced"] = 0
    warnings = []
    total = 0
    for op in ops:
        total += 1
        where = op.get("preferred")
        if where is None:
            counts["unplaced"] += 1
            continue
        counts[where] = counts.get(where, 0) + 1
        if where != "ane" and op.get("op") not in _NO_DEVICE:
            could = (
                "it could run on the ANE"
                if "ane" in op.get("supported", [])
                else ("the ANE does not support it here")
            )
            cost = op.get("cost")
            share = f", {cost:.0%} of the estimated cost" if cost is not None else ""
            warnings.append(
                f"{op.get('op')} {op.get('name')!r} runs on the {where.upper()}, not the ANE "
                f"({could}{share})"
            )
    return {
        "compute_units": COMPUTE_UNITS,
        "ops": total,
        **counts,
        "all_on_ane": total > 0 and counts["ane"] == total - counts["unplaced"],
        "warnings": warnings,
    }


def placement_report(mlmodelc: Path, function: str = "main") -> dict[str, Any]:
    """The placement.json document; `available: false` with the reason where it cannot be made."""
    reason = unavailable_reason()
    if reason is not None:
        return {"available": False, "reason": reason}
    try:
        ops = load_plan(mlmodelc, function)
    except Exception as exc:  # a plan that cannot be made must not fail a compiled kernel
        return {"available": False, "reason": f"MLComputePlan failed: {exc}"}
    return {"available": True, "summary": summarize(ops), "ops": ops}
