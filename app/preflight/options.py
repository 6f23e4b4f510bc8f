"""The preflight's one setting: the weight budget per program, and its limits from the device table.

The reports disagree by more than two orders of magnitude (fused-quantized-mlmodelc.md §2.4,
"Weights per program"): jafreck/ironmill gives a sub-program budget of about 8 MB of fp16, while
sbryngelson/ANEForge holds about 2 GB of baked weights in one program on a Mac and
john-rocky/CoreML-LLM runs 1 GB chunks on an iPhone's ANE. The device table (app/devices,
docs/devices.md) keeps each chip's envelope; the default budget is the smallest of them (an
iPhone's 1 GiB), so a program within it compiles for every chip listed. Going over it is a
warning; only going over the largest envelope (a Mac's ~2 GB) is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.devices import DEFAULT_PROGRAM_WEIGHT_BYTES, HARD_MAX_PROGRAM_WEIGHT_BYTES

DEFAULT_MAX_PROGRAM_WEIGHT_BYTES = DEFAULT_PROGRAM_WEIGHT_BYTES

__all__ = ["DEFAULT_MAX_PROGRAM_WEIGHT_BYTES", "HARD_MAX_PROGRAM_WEIGHT_BYTES", "PreflightOptions"]


@dataclass(frozen=True)
class PreflightOptions:
    max_program_weight_bytes: int = DEFAULT_MAX_PROGRAM_WEIGHT_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.max_program_weight_bytes, int) or self.max_program_weight_bytes < 1:
            raise ValueError(
                "max_program_weight_bytes must be a positive integer, "
                f"not {self.max_program_weight_bytes!r}"
            )
