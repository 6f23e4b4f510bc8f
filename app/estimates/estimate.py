"""A build's work priced on chips: per program and device, FLOPs, weight bytes streamed,
activation bytes, the predicted latency as a range, what bounds it, and whether it fits.

    estimate = estimate_works(works, "chain", [get_chip("m4")])
    header_value(works, "chain")      # X-ANE-Estimate, over the default devices

A chain runs its programs one after another (one dispatch floor each) and its latency is their
sum; a package of functions runs one function per call, so each is priced alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.devices import Chip
from app.devices.calibration import fitted
from app.devices.estimate_model import RANGE, Work, roofline
from app.estimates.devices import DEFAULT_DEVICES, devices_or_error
from app.estimates.work import ProgramWork

KINDS = ("program", "chain", "functions")


def streamed_bytes(chip: Chip, work: ProgramWork) -> int:
    """The weight bytes the chip reads: compressed only where its ANE streams the format."""
    streams = {"palettize": chip.streams_palettized.value, "int8": chip.streams_int8.value}
    if work.compression is None or streams.get(work.compression, False):
        return work.weight_bytes
    return work.dense_weight_bytes


def _fits(chip: Chip, work: ProgramWork) -> tuple[bool, str | None]:
    envelope, axis = chip.program_weight_bytes.value, chip.axis_max.value
    if work.weight_bytes > envelope:
        return False, (
            f"weights {work.weight_bytes:,} bytes, over the {envelope:,} one program "
            f"may hold on {chip.name} by {work.weight_bytes - envelope:,}"
        )
    if work.largest_axis > axis:
        return False, (f"an axis of {work.largest_axis:,}, over {chip.name}'s largest of {axis:,}")
    return True, None


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def price(chip: Chip, work: ProgramWork, path: str) -> dict[str, Any]:
    eff = fitted().efficiency(path, chip.generation)
    cost = roofline(chip, Work(work.flops, streamed_bytes(chip, work), work.activation_bytes), eff)
    fits, why = _fits(chip, work)
    return {
        "name": work.name,
        "flops": work.flops,
        "weight_bytes_streamed": streamed_bytes(chip, work),
        "activation_bytes": work.activation_bytes,
        "latency_ms": _ms(cost.seconds),
        "latency_ms_range": [_ms(cost.seconds / RANGE), _ms(cost.seconds * RANGE)],
        "bound": cost.bound,
        "fits": fits,
        **({"why": why} if why else {}),
    }


def estimate_device(chip: Chip, works: Sequence[ProgramWork], kind: str, path: str) -> dict:
    programs = [price(chip, w, path) for w in works]
    out: dict[str, Any] = {
        "device": chip.name,
        "path": path,
        "programs": programs,
        "fits": all(p["fits"] for p in programs),
    }
    if kind != "functions":
        total = sum(p["latency_ms"] for p in programs)
        out |= {
            "dispatches": len(programs),
            "latency_ms": round(total, 4),
            "latency_ms_range": [round(total / RANGE, 4), round(total * RANGE, 4)],
        }
    return out


def estimate_works(
    works: Sequence[ProgramWork], kind: str, chips: Sequence[Chip], path: str = "coreml"
) -> dict[str, Any]:
    return {
        "kind": kind,
        "model": "roofline + ramp + dispatch floor, calibrated (docs/calibration.md)",
        "devices": [estimate_device(chip, works, kind, path) for chip in chips],
    }


def header_value(
    works: Sequence[ProgramWork], kind: str, chips: Sequence[Chip] | None = None
) -> str:
    """`m4=0.214ms memory; a18-pro=...`: each device's latency (the slowest function's, for a
    package of functions) and bound, over `chips` or the default devices; `!` marks a device it
    does not fit."""
    parts = []
    for chip in chips or devices_or_error(DEFAULT_DEVICES):
        priced = estimate_device(chip, works, kind, "coreml")
        slowest = max(priced["programs"], key=lambda p: p["latency_ms"])
        total = priced.get("latency_ms", slowest["latency_ms"])
        flag = "" if priced["fits"] else "!"
        parts.append(f"{chip.name}={total:g}ms {slowest['bound']}{flag}")
    return "; ".join(parts)


def works_from_json(data: Any) -> tuple[list[ProgramWork], str] | None:
    """The work a cached artifact's sidecar records (None when it records none)."""
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    return [ProgramWork.from_json(p) for p in data["programs"]], data["kind"]


def works_to_json(works: Sequence[ProgramWork], kind: str) -> dict[str, Any]:
    return {"kind": kind, "programs": [w.to_json() for w in works]}
