"""Magnitude pruning: the smallest weights become zeros, stored as a bit mask plus the rest.

The selection is coremltools' own (`prune_weights.compress_by_magnitude`: every weight whose
magnitude is at most the target_sparsity percentile, so ties may prune a little more, computed
here with its expressions), and so are the mask layouts (bits packed LSB first for iOS16, one
uint1 per element for iOS18). With int8, the pruned weight is quantized per
channel (symmetric) the way coremltools' joint compression quantizes a pruned weight: the scales
come from the dense pruned tensor, the kept integers go to
`constexpr_sparse_blockwise_shift_scale`, whose (mask, values) feed `constexpr_sparse_to_dense`.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from app.language.targets import DEFAULT_TARGET, Target, get_target
from app.mil.types import DType
from app.quantize.config import LinearConfig, PruneConfig, QuantizeConfigError, check_config
from app.quantize.coremltools_parts import ct_utils, prune_weights
from app.quantize.linear import block_sizes, dequantize, quantize_blocks
from app.quantize.result import Compressed, ConstexprOp, Param, as_weight


def prune(
    weight: np.ndarray,
    config: PruneConfig,
    target: str | Target = DEFAULT_TARGET,
    *,
    channel_axis: int = 0,
    dtype: DType = DType.FP16,
    field: str = "quantize",
    weight_field: str = "weight",
) -> Compressed:
    """`constexpr_sparse_to_dense` arguments: iOS18 form (nonzero values, a uint1 mask shaped like
    the weight) or, on ios17, the iOS16 form (a byte-packed mask and the shape)."""
    check_config(config, np.shape(weight), target, channel_axis=channel_axis, field=field)
    w = as_weight(weight, dtype, weight_field)
    kept, mask = _by_magnitude(w, config.target_sparsity)
    if kept.size == 0:
        raise QuantizeConfigError(
            f"{field}.target_sparsity", "prunes every weight (they are all zero or equal)"
        )
    if not get_target(target).ios18_compression:
        packed = np.packbits(mask.reshape(-1), bitorder="little")
        old = ct_utils.SparseParamsIos16(nonzero_data=kept, mask=packed, shape=w.shape)
        args = {
            "mask": Param(np.asarray(old.mask, np.uint8), DType.UINT8),
            "nonzero_data": Param(np.asarray(old.nonzero_data, dtype.numpy), dtype),
            "shape": Param(np.asarray(old.shape, np.uint32), DType.UINT32),
        }
        dense = partial(_decompressed_ios16, old, dtype)
        return Compressed((ConstexprOp("constexpr_sparse_to_dense", args),), w.shape, dtype, dense)
    bits = mask.astype(np.uint8)  # the iOS18 uint1 mask, one value per element
    if config.dtype is None:
        args = {"mask": Param(bits, DType.UINT1), "nonzero_data": Param(kept, dtype)}
        dense = partial(_decompressed, kept, bits, dtype)
        return Compressed((ConstexprOp("constexpr_sparse_to_dense", args),), w.shape, dtype, dense)
    pruned = ct_utils.sparse_to_dense(kept, bits)
    return _pruned_int8(pruned, bits, config, dtype, channel_axis)


def _by_magnitude(w: np.ndarray, target_sparsity: float) -> tuple[np.ndarray, np.ndarray]:
    """coremltools' selection (`compress_by_magnitude`: zero every weight whose magnitude is at
    most the target_sparsity percentile): the kept values in order, and where they are. Its
    packing of the mask into bytes and unpacking again for iOS18 are left out."""
    if w.dtype != np.float16:
        magnitude = np.abs(w)
        pruned = np.where(magnitude <= np.percentile(magnitude, target_sparsity * 100), 0, w)
        mask = pruned != 0
        return pruned[mask], mask
    # fp16: the magnitudes are the bits without the sign, and for values ≥ +0 the bits' order is
    # the values' order, so "kept" (magnitude above the fp16 percentile, hence not zero) is one
    # integer comparison instead of NumPy's element-by-element fp16 abs, compare and select
    magnitude = w.view(np.uint16) & np.uint16(0x7FFF)
    threshold = fp16_percentile(magnitude, target_sparsity * 100)
    mask = magnitude > np.asarray(threshold, np.float16).view(np.uint16)
    return w[mask], mask


def fp16_percentile(magnitude: np.ndarray, percent: float) -> np.float16:
    """`np.percentile(magnitude.view(np.float16), percent)` (its default, linear method) of the
    bit patterns of finite non-negative fp16 values, without its partition of the values: their
    order is the patterns' order, so the two order statistics it interpolates between come from
    a histogram of the patterns (one counting pass; NumPy's fp16 partition compares element by
    element in float32, 0.2-0.3 s per 3 M values). The interpolation is NumPy's arithmetic, in
    its dtypes: the virtual index (n - 1) * q in float64, its fraction as a Python float (a
    scalar percent is a weak scalar), and the fp16 lerp (from the lower value below one half,
    back from the upper one at or above it). tests/test_quantize_prune_percentile.py holds it to
    np.percentile on random, tied and degenerate inputs."""
    bits = magnitude.reshape(-1)
    n = bits.size
    if type(percent) is not float or n == 0:
        return np.float16(np.percentile(bits.view(np.float16), percent))
    virtual = (n - 1) * (percent / 100)
    if virtual >= n - 1:  # at or past the last: the largest value (NumPy's index -1)
        lower = upper = -1
    elif virtual < 0:
        lower = upper = 0
    else:
        lower = int(np.floor(virtual))
        upper = lower + 1
    fraction = float(virtual - lower)
    ranked = np.cumsum(np.bincount(bits, minlength=1 << 15))
    a, b = (
        np.uint16(np.searchsorted(ranked, i % n, side="right")).view(np.float16)
        for i in (lower, upper)
    )
    step = b - a
    return b - step * (1 - fraction) if fraction >= 0.5 else a + step * fraction


def _pruned_int8(
    pruned: np.ndarray, mask: np.ndarray, config: PruneConfig, dtype: DType, channel_axis: int
) -> Compressed:
    assert config.dtype is not None
    linear = LinearConfig(dtype=config.dtype)
    sizes = block_sizes(linear, pruned.ndim, channel_axis, input_axis=channel_axis)  # per channel
    data, scale, offset = quantize_blocks(pruned, config.dtype, linear.symmetric, sizes)
    int_dtype = DType(config.dtype)
    kept = data[mask != 0]
    args = {
        "data_mask": Param(mask, DType.UINT1),
        "nonzero_data": Param(kept, int_dtype),
        "scale": Param(scale, dtype),
    }
    if offset is not None:
        args["offset"] = Param(offset, int_dtype)
    gather = ConstexprOp("constexpr_sparse_blockwise_shift_scale", args)
    scatter = ConstexprOp("constexpr_sparse_to_dense", {}, {"mask": 0, "nonzero_data": 1})
    dense = partial(_decompressed_int8, kept, mask, scale, offset, dtype)
    return Compressed((gather, scatter), pruned.shape, dtype, dense)


def _decompressed_ios16(params, dtype: DType) -> np.ndarray:
    return prune_weights.decompress(params).astype(dtype.numpy)


def _decompressed(nonzero: np.ndarray, mask: np.ndarray, dtype: DType) -> np.ndarray:
    return ct_utils.sparse_to_dense(nonzero, mask).astype(dtype.numpy)


def _decompressed_int8(
    kept: np.ndarray, mask: np.ndarray, scale: np.ndarray, offset: np.ndarray | None, dtype: DType
) -> np.ndarray:
    """The kept integers scattered back (the pruned ones are 0, as quantized), dequantized."""
    data = np.zeros(mask.shape, kept.dtype)
    data[mask != 0] = kept
    return np.where(mask != 0, dequantize(data, scale, offset, dtype), 0).astype(dtype.numpy)
