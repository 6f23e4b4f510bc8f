"""What a weight takes in weight.bin, from its shape and its quantize config alone, before any
weight is read: the planner lays programs out with it, and a kit's programs hold exactly that.

Each stored argument of the constexpr op(s) (`app/quantize/result.py`: indices and LUT; data,
scale and offset; mask and values) counts when it goes to weight.bin, as `Var.in_blob` decides
(a value of `BLOB_MIN_SIZE` elements or more; smaller ones are written inside the op): a 3-bit
palette per tensor (8 entries) and a per-tensor scale stay in the program text. Pruning keeps
the values its weights decide (ties prune more); from the config alone that is an estimate, and
`exact` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.language.targets import BLOB_MIN_SIZE
from app.quantize.config import LinearConfig, PalettizeConfig, QuantizeConfig

FP16_BITS = 16
_BITS = {"int8": 8, "uint8": 8, "int4": 4, "uint4": 4}


@dataclass(frozen=True)
class Stored:
    """Bytes a weight takes in weight.bin, and whether they are exact (not a pruning estimate)."""

    nbytes: int
    exact: bool = True

    def __add__(self, other: Stored) -> Stored:
        return Stored(self.nbytes + other.nbytes, self.exact and other.exact)


def blob_bytes(elements: int, bits: int) -> int:
    """An argument of `elements` values of `bits` each: its packed bytes when it is in the blob."""
    return -(-elements * bits // 8) if elements >= BLOB_MIN_SIZE else 0


def stored_bytes(
    shape: Sequence[int], config: QuantizeConfig | None, *, channel_axis: int = 0
) -> Stored:
    """weight.bin bytes of an fp16 weight of `shape` compressed by `config` for ios18 (the
    kits' target), or as it is (None). Output channels on `channel_axis`, their inputs on
    axis 1."""
    elements = math.prod(shape)
    if config is None:
        return Stored(blob_bytes(elements, FP16_BITS))
    channels = shape[channel_axis]
    if isinstance(config, PalettizeConfig):
        groups = channels // config.group_size if config.granularity == "per_grouped_channel" else 1
        return Stored(
            blob_bytes(elements, config.nbits) + blob_bytes(groups * 2**config.nbits, FP16_BITS)
        )
    if isinstance(config, LinearConfig):
        bits = _BITS[config.dtype]
        blocks = {
            "per_tensor": 1,
            "per_channel": channels,
            "per_block": channels * (shape[1] // config.block_size),
        }[config.granularity]
        offset = not (config.symmetric and config.dtype.startswith("int"))
        return Stored(
            blob_bytes(elements, bits)
            + blob_bytes(blocks, FP16_BITS)
            + (blob_bytes(blocks, bits) if offset else 0)
        )
    kept = elements - math.floor(elements * config.target_sparsity)  # at least this many pruned
    values = (
        blob_bytes(kept, 8) + blob_bytes(channels, FP16_BITS)
        if config.dtype
        else blob_bytes(kept, 16)
    )
    return Stored(blob_bytes(elements, 1) + values, exact=False)
