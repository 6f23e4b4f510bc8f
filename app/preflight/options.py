"""The preflight's one setting: the weight budget per program, and its default from the research.

The reports disagree by more than two orders of magnitude (fused-quantized-mlmodelc.md §2.4,
"Weights per program"): jafreck/ironmill (`docs/design/ane-constraints.md`) gives a sub-program
weight budget of about 8 MB of fp16 and saw a 22 MB program fail to compile, while
sbryngelson/ANEForge (`docs/llm.md`, e5rt path) holds about 2 GB of baked weights in one program.
The default is the smaller figure, read as 8 MiB, so that a program over it is flagged wherever a
report says it may fail; going over it is a warning (the larger figure says it may well work), and
only going over the larger figure is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.settings import DEFAULT_PROGRAM_WEIGHT_BUDGET, GiB

# ironmill's "~8 MB fp16 per sub-program", read as 8 MiB (ANE_MAX_PROGRAM_WEIGHT_BYTES's default).
DEFAULT_MAX_PROGRAM_WEIGHT_BYTES = DEFAULT_PROGRAM_WEIGHT_BUDGET
# ANEForge's "~2 GB of baked weights" per program (Anemll: weight files ~2 GB on macOS), read as
# 2 GiB: above it every report expects a compile failure.
HARD_MAX_PROGRAM_WEIGHT_BYTES = 2 * GiB


@dataclass(frozen=True)
class PreflightOptions:
    max_program_weight_bytes: int = DEFAULT_MAX_PROGRAM_WEIGHT_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.max_program_weight_bytes, int) or self.max_program_weight_bytes < 1:
            raise ValueError(
                "max_program_weight_bytes must be a positive integer, "
                f"not {self.max_program_weight_bytes!r}"
            )
