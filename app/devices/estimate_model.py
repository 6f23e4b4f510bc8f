"""The estimate model: what one program dispatch costs on a chip.

    t = floor + max(FLOPs / (peak * ramp(FLOPs) * e_compute), bytes / (bandwidth * e_memory))

A roofline with the ANE's utilisation ramp (small programs do not fill the engine: ANEForge's
`min(1, (FLOPs / 1.8e10) ^ 0.38)`, `aneforge-cost`), plus the fixed dispatch floor each program
pays. `e_compute` and `e_memory` are the only fitted numbers: the share of the peak and of the
bandwidth real programs reach, per runtime path (Core ML, ANE-direct, Core AI) and, where the
calibration has rows for it, per ANE generation (app/devices/calibration.py, docs/calibration.md).
A chain of programs pays one floor per program; nothing overlaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.devices.table import Chip

RAMP_FLOPS = 1.8e10  # FLOPs at which a program fills the engine (ANEForge, h14)
RAMP_EXPONENT = 0.38
PATHS = ("coreml", "ane-direct", "coreai")
COMPUTE, MEMORY = "compute", "memory"
# Predictions are given as [central / RANGE, central * RANGE]: the factor every included
# calibration row is held to, leave-one-out (tests/test_calibration.py).
RANGE = 1.6


@dataclass(frozen=True)
class Work:
    """What one dispatch of one program does: FLOPs, and bytes read from memory."""

    flops: float
    weight_bytes: float  # weights streamed (at the precision the chip streams them at)
    activation_bytes: float = 0.0  # inputs, outputs, caches read

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes


@dataclass(frozen=True)
class Efficiency:
    compute: float
    memory: float


@dataclass(frozen=True)
class Cost:
    """One dispatch's predicted seconds, split into its parts."""

    floor_s: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return self.floor_s + max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return COMPUTE if self.compute_s >= self.memory_s else MEMORY


def ramp(flops: float) -> float:
    """The share of the peak a program of `flops` can reach (1 once it fills the engine)."""
    if flops <= 0:
        return 1.0
    return min(1.0, (flops / RAMP_FLOPS) ** RAMP_EXPONENT)


def roofline(chip: Chip, work: Work, eff: Efficiency) -> Cost:
    peak = chip.peak_tflops.value * 1e12 * ramp(work.flops) * eff.compute
    bandwidth = chip.bandwidth_gbs.value * 1e9 * eff.memory
    return Cost(chip.floor_us.value * 1e-6, work.flops / peak, work.bytes / bandwidth)


def chain_seconds(chip: Chip, works: Sequence[Work], eff: Efficiency) -> float:
    """Programs run one after another: each pays its floor."""
    return sum(roofline(chip, w, eff).seconds for w in works)


def unfitted_split(chip: Chip, works: Sequence[Work]) -> tuple[float, float, float]:
    """(floors, compute, memory) seconds at full efficiency, summed over the programs: what the
    fit divides measured time by."""
    costs = [roofline(chip, w, Efficiency(1.0, 1.0)) for w in works]
    return (
        sum(c.floor_s for c in costs),
        sum(c.compute_s for c in costs),
        sum(c.memory_s for c in costs),
    )
