"""The device table: every per-chip fact (ANE bandwidth, fp16 peak, dispatch floor, per-axis and
per-program limits, working set, memory, compressed-weight streaming, quantization reports), each
with its source and provenance; the estimate model built on it and its calibration.

    from app.devices import CHIPS, get_chip
    chip = get_chip("a18-pro")            # or "A18 Pro", "iPhone 16 Pro"; UnknownDevice says
                                          # which names would do (app/devices/products.py)
    chip.bandwidth_gbs.value, chip.bandwidth_gbs.mark()   # 64, "extrapolated from m4"

Nothing here imports the rest of the app: the settings, the preflight, the estimates and the
planner all read from here.
"""

from app.devices.facts import Fact, Provenance
from app.devices.products import FAMILIES, PRODUCTS, UnknownDevice, get_chip
from app.devices.sources import SOURCES, SOURCES_BY_KEY, Source
from app.devices.table import (
    AXIS_MAX_ANY_CHIP,
    AXIS_MAX_EVERY_CHIP,
    CHIPS,
    CHIPS_BY_NAME,
    COREAI_ARCHITECTURES,
    DEFAULT_PROGRAM_WEIGHT_BYTES,
    HARD_MAX_PROGRAM_WEIGHT_BYTES,
    Chip,
)

__all__ = [
    "AXIS_MAX_ANY_CHIP",
    "AXIS_MAX_EVERY_CHIP",
    "CHIPS",
    "CHIPS_BY_NAME",
    "COREAI_ARCHITECTURES",
    "DEFAULT_PROGRAM_WEIGHT_BYTES",
    "FAMILIES",
    "HARD_MAX_PROGRAM_WEIGHT_BYTES",
    "PRODUCTS",
    "SOURCES",
    "SOURCES_BY_KEY",
    "Chip",
    "Fact",
    "Provenance",
    "Source",
    "UnknownDevice",
    "get_chip",
]
