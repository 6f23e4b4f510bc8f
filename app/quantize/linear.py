"""Linear (affine) quantization: integers plus a scale, and an offset where the range needs one.

The arithmetic is coremltools' own (`linear_quantize_weights.blockwise_compress`, which calls
`optimize._utils.compute_qparams_by_dtype`, and `ios18_quant_params_to_ios16` for ios17), run on
the weight in its stored dtype as coremltools runs it on an fp16 const, so data, scales and offsets
are the ones `coremltools.optimize.coreml.linear_quantize_weights` writes for the same weight.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from app.language.targets import DEFAULT_TARGET, Target, get_target
from app.mil.types import DType
from app.quantize.config import LinearConfig, check_config
from app.quantize.coremltools_parts import ct_utils
from app.quantize.result import Compressed, ConstexprOp, Param, as_weight


def block_sizes(config: LinearConfig, rank: int, channel_axis: int, input_axis: int) -> list[int]:
    """coremltools' per-axis block sizes (0: the whole axis) for a granularity (infer_block_sizes)."""
    sizes = [0] * rank
    if config.granularity != "per_tensor":
        sizes[channel_axis] = 1
    if config.granularity == "per_block":
        sizes[input_axis] = config.block_size
    return sizes


def quantize_blocks(
    w: np.ndarray, dtype: str, symmetric: bool, sizes: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(data, scale, offset) of `w`, scale and offset of the weight's rank (one per block)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # an all-zero block has scale 0
        data, scale, offset = _affine(w, dtype, symmetric, sizes)
    # An all-zero block has scale 0, and 0/0 left NaN (no integer) in its data and offset: store
    # zeros there, which decompress to the same 0 whatever they are.
    if (scale == 0).any():
        blocked = _blocked_shape(data.shape, scale.shape)
        zero = np.broadcast_to(_over_blocks(scale == 0, blocked), blocked).reshape(data.shape)
        data[zero] = 0
        if offset is not None:
            offset[scale == 0] = 0
    return data, scale, offset


_INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15)}


def _affine(
    w: np.ndarray, dtype: str, symmetric: bool, sizes: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """coremltools' `compute_qparams_by_dtype` (LINEAR_SYMMETRIC or LINEAR), the same numbers
    computed faster. Its arithmetic runs on the fp16 weight, where NumPy computes each fp16
    operation in float32 and rounds the result to fp16, element by element; here the weight-sized
    steps run as float32 arrays with the same roundings made explicit (a float32 quotient rounded
    to fp16 is the correctly rounded fp16 quotient: 24 ≥ 2·11 + 2 bits, so the double rounding is
    innocuous) and the per-block ones on the fp16 values as coremltools writes them."""
    q_min, q_max = _INT_RANGES[dtype]
    if symmetric and dtype.startswith("int"):
        q_min += 1  # a symmetric signed range leaves out its most negative value
    if symmetric and dtype.startswith("uint"):
        q_max -= 1
    blocks = [n // b if b else 1 for n, b in zip(w.shape, sizes, strict=True)]
    blocked = w.reshape(_blocked_shape(w.shape, tuple(blocks)))
    inner = tuple(range(1, blocked.ndim, 2))  # each block's own elements
    wide = blocked.astype(np.float32)
    low = np.amin(wide, axis=inner, keepdims=True).astype(w.dtype)
    high = np.amax(wide, axis=inner, keepdims=True).astype(w.dtype)
    if not symmetric and ((low == 0).any() or (high == 0).any()):
        # the sign of a zero extremum reaches the scale and offset here: take it as
        # coremltools' own fp16 reduction gives it
        low = np.amin(blocked, axis=inner, keepdims=True)
        high = np.amax(blocked, axis=inner, keepdims=True)
    offset = None
    if symmetric:
        high = np.maximum(np.abs(low), np.abs(high))
        low = -high
    else:
        low, high = np.minimum(0.0, low), np.maximum(0.0, high)
    scale = (high - low) / (q_max - q_min)  # fp16, as coremltools computes it
    values = (wide / scale.astype(np.float32)).astype(w.dtype).astype(np.float32)
    np.rint(values, out=values)
    if symmetric and dtype.startswith("uint"):
        offset = np.full(scale.shape, q_max // 2, np.float64)
        values = (values.astype(np.float64) + offset).astype(w.dtype).astype(np.float32)
    elif not symmetric:
        offset = np.clip(np.round((q_min * high - q_max * low) / (high - low)), q_min, q_max)
        values = (values + offset.astype(np.float32)).astype(w.dtype).astype(np.float32)
    np.clip(values, q_min, q_max, out=values)
    integer = np.int8 if dtype.startswith("int") else np.uint8
    data = values.reshape(w.shape).astype(integer)
    scale = scale.reshape(blocks).astype(w.dtype)
    return data, scale, None if offset is None else offset.reshape(blocks).astype(integer)


def linear(
    weight: np.ndarray,
    config: LinearConfig,
    target: str | Target = DEFAULT_TARGET,
    *,
    channel_axis: int = 0,
    input_axis: int = 1,
    dtype: DType = DType.FP16,
    field: str = "quantize",
    weight_field: str = "weight",
) -> Compressed:
    """`constexpr_blockwise_shift_scale` arguments (ios18; offset only when not symmetric-signed)
    or `constexpr_affine_dequantize` ones (ios17: per channel, a zero point always, axis)."""
    shape = np.shape(weight)
    check_config(
        config, shape, target, channel_axis=channel_axis, input_axis=input_axis, field=field
    )
    w = as_weight(weight, dtype, weight_field)
    sizes = block_sizes(config, w.ndim, channel_axis, input_axis)
    data, scale, offset = quantize_blocks(w, config.dtype, config.symmetric, sizes)
    dense = partial(dequantize, data, scale, offset, dtype)
    int_dtype = DType(config.dtype)
    if get_target(target).ios18_compression:
        args = {"data": Param(data, int_dtype), "scale": Param(scale, dtype)}
        if offset is not None:
            args["offset"] = Param(offset, int_dtype)
        op = ConstexprOp("constexpr_blockwise_shift_scale", args)
        return Compressed((op,), w.shape, dtype, dense)
    old = ct_utils.ios18_quant_params_to_ios16(
        ct_utils.QuantParams(data=data, scale=scale, offset=offset, nbits=int_dtype.bits)
    )
    args = {
        "quantized_data": Param(data, int_dtype),
        "zero_point": Param(np.asarray(old.zero_point, data.dtype), int_dtype),
        "scale": Param(np.asarray(old.scale, dtype.numpy), dtype),
        "axis": Param(np.asarray(old.axis, np.int32), DType.INT32),
    }
    return Compressed((ConstexprOp("constexpr_affine_dequantize", args),), w.shape, dtype, dense)


def dequantize(
    data: np.ndarray, scale: np.ndarray, offset: np.ndarray | None, dtype: DType
) -> np.ndarray:
    """scale · (data − offset) per block, rounded once to `dtype`. float32 holds every product
    exactly (at most 9 integer bits times an 11-bit fp16 scale), so the one rounding is the only
    one, as in float64; each parameter is broadcast over its block, not repeated."""
    blocked = _blocked_shape(data.shape, scale.shape)
    values = data.reshape(blocked).astype(np.float32)
    if offset is not None:
        values -= _over_blocks(offset.astype(np.float32), blocked)
    values *= _over_blocks(scale.astype(np.float32), blocked)
    return values.reshape(data.shape).astype(dtype.numpy)


def _blocked_shape(shape: tuple[int, ...], blocks: tuple[int, ...]) -> tuple[int, ...]:
    """Each axis split into (blocks, elements per block)."""
    return tuple(n for d, p in zip(shape, blocks, strict=True) for n in (p, d // p))


def _over_blocks(param: np.ndarray, blocked: tuple[int, ...]) -> np.ndarray:
    """A per-block parameter shaped to broadcast over `blocked`."""
    return param.reshape(tuple(n for p in param.shape for n in (p, 1)))
