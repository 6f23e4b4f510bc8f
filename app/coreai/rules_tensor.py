"""Rules for the indexing and spatial primitives: gathers, scatter, one_hot, band_part, pad, the
channel/space shuffles, upsampling, resample, stack and identity.

Core AI gathers only along an axis with indices of the input's rank (`gather_along_axis`) or by
coordinates (`gather_nd`); MIL's gather is the first with its indices laid along the axis and
broadcast over the others. The shuffles are reshapes to rank 6 and a transpose, as the meanings
write them. Upsampling multiplies by the interpolation matrices the meaning uses (a nearest
neighbour's picks one element per row, so it is exact).

resample is `interpolate_coordinates`, which reads a scalar field at points in absolute pixel
indices (0 the first element's), clamps a point outside onto the edge (resample's border
padding) and rounds a nearest point half to even, as the meaning does. The image is a field of
[N·C, H, W] and each output element its own point (its image·channel, y, x), in fp32. What the
field has no argument for is done to the points first: normalized coordinates are an affine map
to pixels; a nearest point is rounded there, so the paddings below move whole pixels; constant
padding is two rows and columns of padding_value around the image (two, so that a shift keeps
half-to-even's ties) and the points shifted onto it; reflection mirrors a point about the outer
pixels' centres, symmetric about their outer edges, which is where the mirrored pixels' linear
interpolation is that of the points themselves.
"""

from __future__ import annotations

import numpy as np

from app.coreai.rules import Rule
from app.coreai.spelling import ca, cast_to, reshape, scalar, transpose
from app.coreai.step import NoCoreAIForm, Step
from app.mil import DType, TensorType
from app.mil.ops.spatial import bilinear_grids, nearest_rows

_INT32 = TensorType(DType.INT32, ())


def _signed(step: Step, arg: str):
    """An index argument as int32 (Core AI's gathers take signed indices)."""
    value = step.value(arg)
    return value if step.type(arg).dtype is DType.INT32 else cast_to(value, _INT32)


def _take(step: Step, value, shape: tuple[int, ...], indices, count: int, axis: int):
    """value[..., indices, ...] along `axis` for a flat int32 index vector of `count`."""
    rank = len(shape)
    laid = reshape(step, indices, [count if i == axis else 1 for i in range(rank)])
    target = [count if i == axis else d for i, d in enumerate(shape)]
    spread = ca().broadcast_to(laid, step.indices(target))
    taken = ca().gather_along_axis(value, spread, np.array(axis, np.int32))
    return reshape(step, taken, target)  # the authoring API leaves its shape unknown


def _gather(step: Step) -> list:
    x, idx = step.type("x"), step.type("indices")
    if step.const("batch_dims", 0):
        raise NoCoreAIForm("gather with batch_dims")
    axis = step.const("axis", 0) % x.rank
    flat = reshape(step, _signed(step, "indices"), [idx.size])
    taken = _take(step, step.value("x"), x.shape, flat, idx.size, axis)
    return [reshape(step, taken, step.out[0].shape)]


def _gather_along_axis(step: Step) -> list:
    axis = step.const("axis", 0) % step.type("x").rank
    indices = _signed(step, "indices")
    return [ca().gather_along_axis(step.value("x"), indices, np.array(axis, np.int32))]


def _gather_nd(step: Step) -> list:
    if step.const("batch_dims", 0):
        raise NoCoreAIForm("gather_nd with batch_dims")
    return [ca().gather_nd(step.value("x"), _signed(step, "indices"))]


def _scatter_along_axis(step: Step) -> list:
    from coreai.authoring import TensorType as CoreAIType

    from app.coreai.dtype_map import coreai_dtype, dtype_name

    data = step.type("data")
    output = CoreAIType(data.shape, coreai_dtype(dtype_name(data.dtype)))
    axis = np.array(step.const("axis", 0) % data.rank, np.int32)
    return [
        ca().scatter_along_axis(
            output,
            step.value("data"),
            step.value("indices"),
            step.value("updates"),
            axis,
            scatter_mode=step.const("mode", "add"),
        )
    ]


def _scatter_nd(step: Step) -> list:
    """Core AI's scatter_nd writes (MIL's mode update); the combining modes have no form."""
    mode = step.const("mode", "add")
    if mode != "update":
        raise NoCoreAIForm(f"scatter_nd mode {mode!r}")
    return [ca().scatter_nd(step.value("data"), step.value("indices"), step.value("updates"))]


def _one_hot(step: Step) -> list:
    out = step.out[0]
    size = step.const("one_hot_vector_size")
    idx = step.type("indices")
    spread = reshape(step, step.value("indices"), (*idx.shape, 1))
    hot = ca().broadcasting_equal(spread, step.indices(np.arange(size)))
    on, off = step.const("on_value", 1), step.const("off_value", 0)
    values = ca().broadcasting_where(hot, scalar(step, on, out), scalar(step, off, out))
    axis = step.const("axis", -1) % out.rank
    if axis == out.rank - 1:
        return [values]
    perm = [*range(axis), out.rank - 1, *range(axis, out.rank - 1)]
    return [transpose(step, values, perm)]


def _band_part(step: Step) -> list:
    like = step.type("x")
    lower, upper = step.const("lower", -1), step.const("upper", -1)
    rows, cols = np.indices(like.shape[-2:])
    keep = ((lower < 0) | (rows - cols <= lower)) & ((upper < 0) | (cols - rows <= upper))
    mask = step.make(keep, "bool_")
    return [ca().broadcasting_where(mask, step.value("x"), scalar(step, 0, like))]


def _pad(step: Step) -> list:
    like = step.type("x")
    given = step.const("pad")
    pads = [0] * (2 * like.rank - len(given)) + list(given)
    mode = step.const("mode", "constant")
    value = scalar(step, step.const("constant_val", 0.0), like)
    return [ca().pad(step.value("x"), step.indices(pads, "uint32"), value, mode)]


def _shuffled(step: Step, split: tuple[int, ...], perm: list[int]) -> list:
    """The input reshaped to rank 6, permuted, reshaped to the output."""
    moved = transpose(step, reshape(step, step.value("x"), split), perm)
    return [reshape(step, moved, step.out[0].shape)]


def _pixel_shuffle(step: Step) -> list:
    n, c, h, w = step.type("x").shape
    f = step.const("upscale_factor")
    return _shuffled(step, (n, c // (f * f), f, f, h, w), [0, 1, 4, 2, 5, 3])


def _depth_to_space(step: Step) -> list:
    n, c, h, w = step.type("x").shape
    b = step.const("block_size")
    return _shuffled(step, (n, b, b, c // (b * b), h, w), [0, 3, 4, 1, 5, 2])


def _space_to_depth(step: Step) -> list:
    n, c, h, w = step.type("x").shape
    b = step.const("block_size")
    return _shuffled(step, (n, c, h // b, b, w // b, b), [0, 3, 5, 1, 2, 4])


def _batch_to_space(step: Step) -> list:
    n, c, h, w = step.type("x").shape
    bh, bw = step.const("block_shape")
    (top, bottom), (left, right) = step.const("crops")
    moved = transpose(
        step, reshape(step, step.value("x"), (bh, bw, n // (bh * bw), c, h, w)), [2, 3, 4, 0, 5, 1]
    )
    full = reshape(step, moved, (n // (bh * bw), c, h * bh, w * bw))
    return [
        ca().slice_(
            full,
            step.indices([0, 0, top, left]),
            step.indices([n // (bh * bw), c, h * bh - bottom, w * bw - right]),
            step.indices([1, 1, 1, 1]),
        )
    ]


def _upsample_nearest(step: Step) -> list:
    like = step.type("x")
    rows = nearest_rows(like.shape[-2], step.const("scale_factor_height", 1))
    cols = nearest_rows(like.shape[-1], step.const("scale_factor_width", 1))
    tall = _take(step, step.value("x"), like.shape, step.indices(rows), rows.size, like.rank - 2)
    shape = (*like.shape[:-2], rows.size, like.shape[-1])
    return [_take(step, tall, shape, step.indices(cols), cols.size, like.rank - 1)]


def _upsample_bilinear(step: Step) -> list:
    like = step.type("x")
    rows, cols = bilinear_grids(step, like.shape)
    lead = [1] * (like.rank - 2)
    left = step.make(rows.reshape(*lead, *rows.shape), like)
    right = step.make(cols.T.reshape(*lead, *cols.T.shape), like)
    tall = ca().broadcasting_batch_matmul(left, step.value("x"))
    return [ca().broadcasting_batch_matmul(tall, right)]


def _floor_mod(step: Step, p, period: float):
    """p modulo `period`, in [0, period) (Core AI's modulo keeps the dividend's sign)."""
    size = scalar(step, period, "float32")
    return ca().broadcasting_modulo(
        ca().broadcasting_add(ca().broadcasting_modulo(p, size), size), size
    )


def _mirrored(step: Step, p, high: float, period: float):
    """p mirrored into [high - period/2, high] about that range's ends, again and again:
    high - |m - period/2| for m = (p - low) modulo period."""
    low = high - period / 2
    m = _floor_mod(step, ca().broadcasting_add(p, scalar(step, -low, "float32")), period)
    away = ca().abs_(ca().broadcasting_add(m, scalar(step, -period / 2, "float32")))
    return ca().broadcasting_sub(scalar(step, high, "float32"), away)


def _pixel_points(step: Step, p, size: int):
    """One coordinate [N, H_out, W_out, 1] (fp32) along an axis of `size` pixels as the pixel
    position the field reads (the padding applied)."""
    mode, align = step.const("coordinates_mode"), bool(step.const("align_corners"))
    scale, shift = 1.0, 0.0  # pixel = scale · coordinate + shift
    if mode != "unnormalized":
        scale = (size - 1) / 2 if align else size / 2
        shift = (size - 1) / 2
        if mode == "normalized_zero_to_one":  # c → 2c - 1 first
            scale, shift = 2 * scale, shift - scale
    padding = step.const("padding_mode")
    if padding == "constant":
        shift += _FRAME
    if (scale, shift) != (1.0, 0.0):
        p = ca().broadcasting_add(
            ca().broadcasting_mul(p, scalar(step, scale, "float32")),
            scalar(step, shift, "float32"),
        )
    if step.const("sampling_mode") == "nearest":
        p = ca().round_(p)
    if padding == "reflection" and size > 1:  # about the centres of pixels 0 and size - 1
        p = _mirrored(step, p, size - 1, 2 * (size - 1))
    elif padding == "symmetric":  # about their outer edges, -½ and size - ½
        p = _mirrored(step, p, size - 0.5, 2 * size)
    return p


_FRAME = 2  # constant padding's rows and columns around the image


def _resample(step: Step) -> list:
    n, c, h, w = step.type("x").shape
    _, rows, cols, _ = step.type("coordinates").shape
    like = step.type("x")
    x = step.value("x")
    if step.const("padding_mode") == "constant":
        frame = [0, 0, 0, 0, *[_FRAME] * 4]
        fill = scalar(step, step.const("padding_value"), like)
        x = ca().pad(x, step.indices(frame, "uint32"), fill)
        h, w = h + 2 * _FRAME, w + 2 * _FRAME
    grid = step.value("coordinates")
    if step.type("coordinates").dtype is not DType.FP32:
        grid = cast_to(grid, TensorType(DType.FP32, ()))
    px, py = ca().split(grid, step.indices([1, 1], "uint32"), np.array(3, np.int32))
    size = step.type("x").shape
    spread = (n, c, rows, cols, 1)

    def spread_out(value):  # reshaped, as the authoring API leaves broadcast_to's shape unknown
        return reshape(step, ca().broadcast_to(value, step.indices(spread)), spread)

    image = np.arange(n * c, dtype=np.float32).reshape(n, c, 1, 1, 1)
    points = [spread_out(step.make(image, "float32"))]
    for p, axis_size in ((py, size[2]), (px, size[3])):
        p = _pixel_points(step, p, axis_size)
        points.append(spread_out(reshape(step, p, (n, 1, rows, cols, 1))))
    flat = reshape(step, ca().concat(np.array(4, np.int32), points), (n * c * rows * cols, 3))
    field = reshape(step, x, (n * c, h, w))
    how = "nearest_neighbor" if step.const("sampling_mode") == "nearest" else "linear"
    return [reshape(step, ca().interpolate_coordinates(field, flat, how), step.out[0].shape)]


def _stack(step: Step) -> list:
    out = step.out[0]
    axis = step.const("axis") % out.rank
    single = [1 if i == axis else d for i, d in enumerate(out.shape)]
    parts = [reshape(step, v, single) for v in step.values("values")]
    return [ca().concat(np.array(axis, np.int32), parts)]


RULES: dict[str, Rule] = {
    "gather": _gather,
    "gather_along_axis": _gather_along_axis,
    "gather_nd": _gather_nd,
    "scatter_along_axis": _scatter_along_axis,
    "scatter_nd": _scatter_nd,
    "one_hot": _one_hot,
    "band_part": _band_part,
    "pad": _pad,
    "pixel_shuffle": _pixel_shuffle,
    "depth_to_space": _depth_to_space,
    "space_to_depth": _space_to_depth,
    "batch_to_space": _batch_to_space,
    "upsample_nearest_neighbor": _upsample_nearest,
    "upsample_bilinear": _upsample_bilinear,
    "resample": _resample,
    "stack": _stack,
    "identity": lambda step: [step.value("x")],
}
