"""Palettization: k-means look-up tables and the indices into them.

The grouping, the LUT layout and the iOS16 conversion are coremltools' own
(`palettize_weights.grouped_channelwise_compress`, `ios18_lut_params_to_ios16`), called on plain
arrays. The clustering is coremltools' k-means helper forced onto its bundled `kmeans1d`, the
optimal 1-D k-means (a dynamic programme over the sorted distinct values, weighted by their
counts): deterministic on every machine, and no larger an error than any other clustering of the
same values; for fp16 groups its input comes from their histogram (app/quantize/kmeans.py), not
from sorting their elements. coremltools itself takes this path for fp16 weights of 10,000 elements or more per
group and scikit-learn's seeded KMeans below that (not a dependency here), so for those large
weights our tables are coremltools' byte for byte.
"""

from __future__ import annotations

import os
from functools import cache, partial

import numpy as np

from app.language.targets import DEFAULT_TARGET, Target, get_target
from app.mil.types import DType
from app.quantize.config import PalettizeConfig, check_config
from app.quantize.coremltools_parts import (
    _get_kmeans_lookup_table_and_weight,
    ct_utils,
    palettize_weights,
)
from app.quantize.kmeans import compiled, group_palettes, kmeans_palette
from app.quantize.result import Compressed, ConstexprOp, Param, as_weight
from app.settings import Settings


@cache
def palette_workers() -> int:
    """Threads clustering one weight's groups (the compiled k-means releases the GIL; the palettes
    do not depend on how many): ANE_PALETTE_WORKERS, else every core this process may use. Two
    on an idle two-core machine took a 4-bit kit per 32 channels from 2.8x to 1.9-2.0x the fp16
    kit's time (BENCHMARKS.md, "Quantized model kits"); on a loaded one they did not pay."""
    given = Settings().palette_workers
    if given:
        return given
    if hasattr(os, "sched_getaffinity"):  # Linux: the cores this process may run on
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_INDEX_DTYPES = {
    1: DType.UINT1,
    2: DType.UINT2,
    3: DType.UINT3,
    4: DType.UINT4,
    6: DType.UINT6,
    8: DType.UINT8,
}


def _kmeans(nbits: int, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """coremltools' kmeans1d palette of one group: from its histogram when it is fp16
    (app/quantize/kmeans.py, the same LUT and indices), from its sorted elements otherwise."""
    if group.dtype == np.float16:
        return kmeans_palette(group, nbits)
    lut, indices = _get_kmeans_lookup_table_and_weight(nbits, group, force_kmeans1d=True)
    return lut.astype(group.dtype), np.asarray(indices, np.uint8)


def palettize(
    weight: np.ndarray,
    config: PalettizeConfig,
    target: str | Target = DEFAULT_TARGET,
    *,
    channel_axis: int = 0,
    dtype: DType = DType.FP16,
    field: str = "quantize",
    weight_field: str = "weight",
) -> Compressed:
    """`constexpr_lut_to_dense` arguments for `weight`: iOS18 form (uintN indices shaped like the
    weight, lut [.., groups, .., 2^nbits, 1]) or, on ios17, the iOS16 form (packed uint8 indices,
    a flat lut, the shape)."""
    check_config(config, np.shape(weight), target, channel_axis=channel_axis, field=field)
    w = as_weight(weight, dtype, weight_field)
    group = config.group_size if config.granularity == "per_grouped_channel" else 0
    params = _compiled_palettes(w, config.nbits, channel_axis, group)
    if params is None:
        params = palettize_weights.grouped_channelwise_compress(
            w,
            "CUSTOM",
            config.nbits,
            channel_axis,
            group,
            lut_function=partial(_kmeans, config.nbits),
        )
    indices = params.indices.astype(np.uint8)  # drops coremltools' sub-byte dtype metadata
    lut = np.asarray(params.lut, dtype.numpy)
    dense = partial(_dense, indices, lut, channel_axis)
    if get_target(target).ios18_compression:
        args = {"indices": Param(indices, _INDEX_DTYPES[config.nbits]), "lut": Param(lut, dtype)}
    else:
        old = ct_utils.ios18_lut_params_to_ios16(params._replace(indices=indices, lut=lut))
        args = {
            "indices": Param(np.asarray(old.indices, np.uint8), DType.UINT8),
            "lut": Param(np.asarray(old.lut, dtype.numpy), dtype),
            "shape": Param(np.asarray(old.shape, np.uint32), DType.UINT32),
        }
    return Compressed((ConstexprOp("constexpr_lut_to_dense", args),), w.shape, dtype, dense)


def _compiled_palettes(
    w: np.ndarray, nbits: int, channel_axis: int, group: int
) -> ct_utils.LutParams | None:
    """`grouped_channelwise_compress(w, "CUSTOM", nbits, channel_axis, group, _kmeans)`'s result
    for an fp16 weight, every group's palette computed in one call of the compiled module
    (app/quantize/kmeans.py, `group_palettes`): the same LUT and indices, laid out as coremltools
    lays them out (groups of `group` channels, 0 for all, along `channel_axis` moved first; each
    group's elements in C order). None where it does not apply: not fp16, not built, or channels
    that do not split into groups (coremltools decides those)."""
    if w.dtype != np.float16 or not compiled() or w.ndim == 0:
        return None
    swapped = np.swapaxes(w, 0, channel_axis) if channel_axis != 0 else w
    channels = swapped.shape[0]
    group = group or channels
    if channels % group:
        return None
    groups = channels // group
    bits = np.ascontiguousarray(swapped).view(np.uint16).reshape(groups, -1)
    lut, indices = group_palettes(bits, nbits, palette_workers())
    lut_shape = [1] * (w.ndim + 2)
    lut_shape[0], lut_shape[-2] = groups, 1 << nbits
    lut, indices = lut.reshape(lut_shape), indices.reshape(swapped.shape)
    if channel_axis != 0:
        lut, indices = np.swapaxes(lut, 0, channel_axis), np.swapaxes(indices, 0, channel_axis)
    return ct_utils.LutParams(indices, lut, None)


def _dense(indices: np.ndarray, lut: np.ndarray, channel_axis: int) -> np.ndarray:
    """lut[table of the element's channel group, index]."""
    groups, channels = lut.shape[channel_axis], indices.shape[channel_axis]
    view = [1] * indices.ndim
    view[channel_axis] = channels
    table = (np.arange(channels) // (channels // groups)).reshape(view)
    return lut.reshape(groups, -1)[table, indices]
