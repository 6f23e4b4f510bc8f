"""RoiAlign, lowered onto MIL's resample as onnxruntime computes it.

Each region's sample points (a grid of sampling_ratio² per output bin, in pixels) are
coordinates. A point up to a pixel outside the map is clamped onto its edge (resample's border
padding); one further out counts 0 (a mask). A pool over the ratio's window makes each bin.

mode avg reads each point bilinearly and averages the bin (avg_pool). mode max is onnxruntime's:
not the largest sample but the largest of each sample's four bilinear terms, weight × corner
pixel (a term of weight 0 included, so a bin of negative pixels can give 0), the largest of a bin
(max_pool). The four corners are read as nearest-neighbour resamples at whole-pixel points,
each times its weight, with the clamping onnxruntime does: a point below 0 is 0, one at or
beyond the last pixel is that pixel, with a zero-weight second corner.

Several images: every image is read at every region's points and each region keeps its own
image's samples (a one-hot of batch_indices over the images, multiplied and summed), which the
batch_indices input may be computed for; regions known at import to lie in one image read that
image alone. Points of regions known at import are computed then; of computed regions, in the
program. Either way the points are fp16, as GridSample's grid is: on a map 128 to 256 pixels
wide a point moves by up to 1/16 pixel (fp16's step there is 1/8).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from app.errors import RequestError
from app.mil import Var
from app.onnx.lowering import Handler, Lowering, Node, Unlowered, Value


def _text(node: Node, name: str, default: str) -> str:
    value = node.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _calc(ctx: Lowering, op: str, now: Callable, x: Value, y: Value) -> Value:
    """An elementwise op, evaluated now (`now`, in float64) when both operands are known."""
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return now(x.astype(np.float64), y)
    return ctx.op(op, x=x, y=y)


def _reshaped(ctx: Lowering, value: Value, shape: list[int]) -> Value:
    if isinstance(value, np.ndarray):
        return value.reshape(shape)
    return ctx.op("reshape", x=value, shape=np.array(shape, np.int32))


def _columns(ctx: Lowering, value: Value, begin: int, count: int = 2) -> Value:
    """Columns begin … begin + count - 1 of the last axis."""
    if isinstance(value, np.ndarray):
        return value[..., begin : begin + count]
    shape = list(value.tensor.shape)
    return ctx.op(
        "slice_by_index",
        x=value,
        begin=np.array([0] * (len(shape) - 1) + [begin], np.int32),
        end=np.array([*shape[:-1], begin + count], np.int32),
    )


def _joined(ctx: Lowering, first: Value, second: Value) -> Value:
    """[..., 2] points of `first`'s x and `second`'s y."""
    x, y = _columns(ctx, first, 0, 1), _columns(ctx, second, 1, 1)
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return np.concatenate([x, y], axis=-1)
    return ctx.op("concat", values=(x, y), axis=-1)


def _product(ctx: Lowering, value: Value) -> Value:
    """The product of the last axis (two factors), that axis dropped."""
    if isinstance(value, np.ndarray):
        return value.prod(axis=-1)
    axis = value.tensor.rank - 1
    return ctx.op("reduce_prod", x=value, axes=np.array([axis], np.int32), keep_dims=False)


def roi_align(ctx: Lowering, node: Node) -> list[Value]:
    """RoiAlign, avg or max, of any number of images: see the module's docstring."""
    x, rois = node.var(0), node.given(1)
    if x.tensor.rank != 4:
        raise RequestError(node.field, f"RoiAlign node {node.label!r}: X is not [N, C, H, W]")
    n, c, h, w = x.tensor.shape
    mode = _text(node, "mode", "avg")
    if mode not in ("avg", "max"):
        raise RequestError(
            node.field, f"RoiAlign node {node.label!r}: mode {mode!r} (ONNX defines avg and max)"
        )
    coords = _text(
        node,
        "coordinate_transformation_mode",
        "half_pixel" if ctx.model.opset >= 16 else "output_half_pixel",
    )
    if coords not in ("half_pixel", "output_half_pixel"):
        raise Unlowered(f"RoiAlign coordinate_transformation_mode {coords!r}")
    oh, ow = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    k = (rois.shape if isinstance(rois, np.ndarray) else rois.tensor.shape)[0]
    x, n, select = _images(ctx, node, x, n, k)
    corners = _calc(
        ctx, "mul", np.multiply, rois, np.array(float(node.attr("spatial_scale", 1.0)), np.float32)
    )
    if coords == "half_pixel":
        corners = _calc(ctx, "sub", np.subtract, corners, np.array(0.5, np.float32))
    start = _columns(ctx, corners, 0)  # (x, y): resample's order
    size = _calc(ctx, "sub", np.subtract, _columns(ctx, corners, 2), start)
    if coords == "output_half_pixel":
        size = _calc(ctx, "maximum", np.maximum, size, np.array(1.0, np.float32))
    ry, rx = _ratio(node, size, oh, ow)
    bins = _calc(ctx, "real_div", np.divide, size, np.array([ow, oh], np.float32))
    rows, cols = oh * ry, ow * rx
    fractions = np.stack(
        np.broadcast_arrays(
            ((np.arange(cols) + 0.5) / rx)[None, :], ((np.arange(rows) + 0.5) / ry)[:, None]
        ),
        axis=-1,
    )  # [rows, cols, (x, y)]: bin index plus the sample's offset in it, in bins
    offsets = _calc(ctx, "mul", np.multiply, _reshaped(ctx, bins, [k, 1, 1, 2]), fractions[None])
    points = _calc(ctx, "add", np.add, _reshaped(ctx, start, [k, 1, 1, 2]), offsets)
    points = _reshaped(ctx, points, [1, k * rows, cols, 2])
    sample = _bilinear if mode == "avg" else _largest_term
    sampled = _masked(ctx, sample(ctx, x, n, points, h, w), points, h, w)  # [N, C, K·rows, cols]
    if select is None:
        per_image = ctx.op("reshape", x=sampled, shape=np.array([c, k, rows, cols], np.int32))
    else:
        spread = ctx.op("reshape", x=sampled, shape=np.array([n, c, k, rows * cols], np.int32))
        kept = ctx.op(
            "reduce_sum",
            x=ctx.op("mul", x=spread, y=select),
            axes=np.array([0], np.int32),
            keep_dims=False,
        )
        per_image = ctx.op("reshape", x=kept, shape=np.array([c, k, rows, cols], np.int32))
    per_region = ctx.op(
        "transpose",
        node.out[0] if rx == ry == 1 else None,
        x=per_image,
        perm=np.array([1, 0, 2, 3], np.int32),
    )
    if rx == ry == 1:
        return [per_region]
    return [
        ctx.op(
            "avg_pool" if mode == "avg" else "max_pool",
            node.out[0],
            x=per_region,
            kernel_sizes=np.array([ry, rx], np.int32),
            strides=np.array([ry, rx], np.int32),
            pad_type="valid",
            **({"exclude_padding_from_average": False} if mode == "avg" else {}),
        )
    ]


def _images(ctx: Lowering, node: Node, x: Var, n: int, k: int) -> tuple[Var, int, Value | None]:
    """The images the regions read, how many, and the one-hot [N, 1, K, 1] of each region's
    image (None when all read the one image)."""
    index = node.given(2)
    if isinstance(index, np.ndarray):
        given = np.asarray(index).reshape(-1).astype(np.int64)
        if given.size != k or not ((given >= 0) & (given < n)).all():
            raise RequestError(
                node.field,
                f"RoiAlign node {node.label!r}: batch_indices {given.tolist()} for {k} regions "
                f"of {n} images",
            )
        if n == 1:
            return x, 1, None
        if (given == given[0]).all():  # one image: read it alone
            first = int(given[0])
            alone = ctx.op(
                "slice_by_index",
                x=x,
                begin=np.array([first, 0, 0, 0], np.int32),
                end=np.array([first + 1, *x.tensor.shape[1:]], np.int32),
            )
            return alone, 1, None
        hot = given[None, :] == np.arange(n)[:, None]
        return x, n, hot.astype(np.float32).reshape(n, 1, k, 1)
    if n == 1:  # the one image every index must name
        return x, 1, None
    indices = ctx.op("reshape", x=index, shape=np.array([1, 1, k, 1], np.int32))
    names = np.arange(n, dtype=np.int32).reshape(n, 1, 1, 1)
    hot = ctx.op(
        "select",
        cond=ctx.op("equal", x=indices, y=names),
        a=np.array(1.0, np.float32),
        b=np.array(0.0, np.float32),
    )
    return x, n, hot


def _ratio(node: Node, size: Value, oh: int, ow: int) -> tuple[int, int]:
    """Samples per bin along y and x: sampling_ratio, or (0) ⌈size / bins⌉, one for all."""
    ratio = int(node.attr("sampling_ratio", 0))
    if ratio < 0:
        raise RequestError(node.field, f"RoiAlign node {node.label!r}: sampling_ratio {ratio}")
    if ratio:
        return ratio, ratio
    if not isinstance(size, np.ndarray):
        raise Unlowered(
            "RoiAlign with sampling_ratio 0 (a sample count that follows each region's size) "
            "on regions computed from the data"
        )
    counts = {(math.ceil(sx / ow), math.ceil(sy / oh)) for sx, sy in size.tolist()}
    if len(counts) != 1:
        raise Unlowered(
            f"RoiAlign with sampling_ratio 0 over regions of different sample counts "
            f"{sorted(counts)} (one pool window for all)"
        )
    ((rx, ry),) = counts
    return max(ry, 1), max(rx, 1)


def _at(ctx: Lowering, x: Var, n: int, points: Value, sampling: str) -> Var:
    """x read at the [1, P, cols, 2] points, each image at the same ones: [N, C, P, cols]."""
    if n > 1:
        points = (
            np.broadcast_to(points, (n, *points.shape[1:]))
            if isinstance(points, np.ndarray)
            else ctx.op("tile", x=points, reps=np.array([n, 1, 1, 1], np.int32))
        )
    return ctx.op(
        "resample",
        x=x,
        coordinates=points,
        sampling_mode=sampling,
        padding_mode="border",
        padding_value=np.array(0.0, np.float32),
        coordinates_mode="unnormalized",
        align_corners=False,
    )


def _bilinear(ctx: Lowering, x: Var, n: int, points: Value, h: int, w: int) -> Var:
    return _at(ctx, x, n, points, "bilinear")


def _largest_term(ctx: Lowering, x: Var, n: int, points: Value, h: int, w: int) -> Var:
    """The largest of each point's four bilinear terms, clamped as onnxruntime clamps."""
    last = np.array([w - 1, h - 1], np.float32)
    raised = _calc(ctx, "maximum", np.maximum, points, np.array(0.0, np.float32))
    low: Value = (
        np.minimum(np.floor(raised), last)
        if isinstance(raised, np.ndarray)
        else ctx.op("minimum", x=ctx.op("floor", x=raised), y=last)
    )
    high = _calc(
        ctx, "minimum", np.minimum, _calc(ctx, "add", np.add, low, np.array(1.0, np.float32)), last
    )
    near = _calc(  # the distance past the low corner: 0 at or beyond the last pixel
        ctx, "sub", np.subtract, _calc(ctx, "minimum", np.minimum, raised, last), low
    )
    one = np.array(1.0, np.float32)
    far = 1.0 - near if isinstance(near, np.ndarray) else ctx.op("sub", x=one, y=near)
    terms = []
    for (corner_x, weight_x), (corner_y, weight_y) in (
        ((low, far), (low, far)),
        ((high, near), (low, far)),
        ((low, far), (high, near)),
        ((high, near), (high, near)),
    ):
        weight = _product(ctx, _joined(ctx, weight_x, weight_y))  # [1, P, cols]
        _, p, cols = weight.shape if isinstance(weight, np.ndarray) else weight.tensor.shape
        read = _at(ctx, x, n, _joined(ctx, corner_x, corner_y), "nearest")
        terms.append(ctx.op("mul", x=read, y=_reshaped(ctx, weight, [1, 1, p, cols])))
    return ctx.op(
        "maximum",
        x=ctx.op("maximum", x=terms[0], y=terms[1]),
        y=ctx.op("maximum", x=terms[2], y=terms[3]),
    )


def _masked(ctx: Lowering, sampled: Var, points: Value, h: int, w: int) -> Var:
    """Samples at points more than a pixel outside the map as 0 (onnxruntime's)."""
    low, high = np.array([-1.0, -1.0], np.float32), np.array([w, h], np.float32)
    if isinstance(points, np.ndarray):
        inside = np.all((points >= low) & (points <= high), axis=-1)
        if inside.all():
            return sampled
        return ctx.op("mul", x=sampled, y=inside[:, None].astype(np.float32))
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    above = ctx.op("select", cond=ctx.op("greater_equal", x=points, y=low), a=one, b=zero)
    below = ctx.op("select", cond=ctx.op("less_equal", x=points, y=high), a=above, b=zero)
    _, rows, cols, _ = points.tensor.shape
    inside = ctx.op(
        "reduce_min", x=below, axes=np.array([3], np.int32), keep_dims=False
    )  # [1, K·rows, cols]: both coordinates in range
    inside = ctx.op("reshape", x=inside, shape=np.array([1, 1, rows, cols], np.int32))
    return ctx.op("mul", x=sampled, y=inside)


HANDLERS: dict[str, Handler] = {"RoiAlign": roi_align}
