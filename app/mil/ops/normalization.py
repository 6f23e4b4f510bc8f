"""Normalizations (coremltools `normalization.py`). None is built here yet: the catalog spells
RMSNorm out of reductions (app/kernels/rmsnorm.py); these records hold what other programs'
layer_norm and instance_norm are known to do on the ANE and how Apple names them."""

from __future__ import annotations

from app.mil.ops import sources as src
from app.mil.ops.record import AneFacts, AneStatus, Family, OpRecord, Seen

F = Family.NORMALIZATION

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "layer_norm",
        F,
        ane=AneFacts(
            AneStatus.REPORTED_FAILING,
            "ANEForge reports layer_norm failures that depend on the chip and on the affine "
            "values; if the compile fails, spell it with reduce_mean, sub, mul and rsqrt",
            f"{src.FUSED_24}; sbryngelson/ANEForge issue #149",
        ),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord("instance_norm", F, histogram={17: Seen(17, src.PUBLISHED)}),
)
