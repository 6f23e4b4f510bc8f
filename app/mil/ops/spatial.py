"""Spatial rearrangements of [N, C, H, W] and padding (coremltools `tensor_operation.py`,
`tensor_transformation.py`, `image_resizing.py`): pad, pixel_shuffle, depth_to_space,
space_to_depth, batch_to_space, the two upsamplings and resample.

depth_to_space and space_to_depth order the channels block row, block column, then channel
(TensorFlow's DCR, which coremltools' TensorFlow frontend maps onto them); pixel_shuffle orders
channel first (PyTorch's, ONNX's CRD).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation
from app.mil.ops import sources as src
from app.mil.ops.common import MOVES, U, swept
from app.mil.ops.record import (
    BOOL,
    INT,
    STR,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
)
from app.mil.types import FLOATS, DType, TensorType

F = Family.LAYOUT
_FLOAT_X = {"T": FLOATS}
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}  # -> NumPy's
_SCALE = Arg("U", optional=True, const=True)
_SCALES = {"T": FLOATS, "U": frozenset({DType.FP32, DType.INT32})}


def _pad_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    pad = call.const("pad")
    mode = call.const("mode", "constant")
    if mode not in _PAD_MODES:
        raise call.fail("mode", f"{mode!r} is not one of {', '.join(_PAD_MODES)}")
    if not pad or len(pad) % 2 or len(pad) > 2 * x.rank or min(pad) < 0:
        raise call.fail("pad", f"needs (before, after) pairs >= 0 for the last axes, got {pad}")
    shape = list(x.shape)
    for i in range(len(pad) // 2):
        axis = x.rank - len(pad) // 2 + i
        before, after = pad[2 * i], pad[2 * i + 1]
        limit = {"reflect": shape[axis] - 1, "replicate": shape[axis]}.get(mode)
        if limit is not None and max(before, after) > limit:
            raise call.fail("pad", f"{mode} pads at most {limit} on an axis of {shape[axis]}")
        shape[axis] += before + after
    return [TensorType(x.dtype, tuple(shape))]


def _pad(a: Args) -> np.ndarray:
    x, pad = a["x"], a.const("pad")
    widths = [(0, 0)] * (x.ndim - len(pad) // 2) + [
        (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)
    ]
    mode: Any = _PAD_MODES[a.const("mode", "constant")]  # one of NumPy's mode names
    if mode == "constant":
        return np.pad(x, widths, constant_values=a.const("constant_val", 0.0))
    return np.pad(x, widths, mode=mode)


def _rank4(call: Call) -> tuple[int, int, int, int]:
    x = call.type("x")
    if x.rank != 4:
        raise call.fail("x", f"needs [N, C, H, W], got {x}")
    n, c, h, w = x.shape
    return n, c, h, w


def _pixel_shuffle_type(call: Call) -> list[TensorType]:
    n, c, h, w = _rank4(call)
    f = call.const("upscale_factor")
    if f < 1 or c % (f * f):
        raise call.fail("upscale_factor", f"{f}² does not divide the {c} channels")
    return [TensorType(call.type("x").dtype, (n, c // (f * f), h * f, w * f))]


def _pixel_shuffle(a: Args) -> np.ndarray:
    x, f = a["x"], int(a.const("upscale_factor"))
    n, c, h, w = x.shape
    y = x.reshape(n, c // (f * f), f, f, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (f * f), h * f, w * f)


def _depth_to_space_type(call: Call) -> list[TensorType]:
    n, c, h, w = _rank4(call)
    b = call.const("block_size")
    if b < 2 or c % (b * b):
        raise call.fail("block_size", f"needs a block of 2 or more whose square divides {c}")
    return [TensorType(call.type("x").dtype, (n, c // (b * b), h * b, w * b))]


def _depth_to_space(a: Args) -> np.ndarray:
    x, b = a["x"], int(a.const("block_size"))
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_type(call: Call) -> list[TensorType]:
    n, c, h, w = _rank4(call)
    b = call.const("block_size")
    if b < 2 or h % b or w % b:
        raise call.fail("block_size", f"needs a block of 2 or more dividing {h} and {w}")
    return [TensorType(call.type("x").dtype, (n, c * b * b, h // b, w // b))]


def _space_to_depth(a: Args) -> np.ndarray:
    x, b = a["x"], int(a.const("block_size"))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _batch_to_space_type(call: Call) -> list[TensorType]:
    n, c, h, w = _rank4(call)
    block, crops = call.const("block_shape"), call.const("crops")
    if len(block) != 2 or min(block) < 1 or n % (block[0] * block[1]):
        raise call.fail("block_shape", f"needs two factors >= 1 dividing the batch {n}")
    if np.shape(crops) != (2, 2) or np.min(crops) < 0:
        raise call.fail("crops", f"needs [[top, bottom], [left, right]] >= 0, got {crops}")
    out_h = h * block[0] - crops[0][0] - crops[0][1]
    out_w = w * block[1] - crops[1][0] - crops[1][1]
    if out_h < 1 or out_w < 1:
        raise call.fail("crops", f"crops {crops} leave nothing of {h * block[0]}×{w * block[1]}")
    return [TensorType(call.type("x").dtype, (n // (block[0] * block[1]), c, out_h, out_w))]


def _batch_to_space(a: Args) -> np.ndarray:
    """The batch is block rows × block columns × images (TensorFlow's order)."""
    x = a["x"]
    (bh, bw), crops = a.const("block_shape"), a.const("crops")
    n, c, h, w = x.shape
    y = x.reshape(bh, bw, n // (bh * bw), c, h, w).transpose(2, 3, 4, 0, 5, 1)
    y = y.reshape(n // (bh * bw), c, h * bh, w * bw)
    return y[..., crops[0][0] : h * bh - crops[0][1], crops[1][0] : w * bw - crops[1][1]]


def _upsample_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    if x.rank < 3:
        raise call.fail("x", f"needs rank 3 or more, got {x}")
    if call.const("align_corners", True) and call.const("half_pixel_centers", False):
        raise call.fail("half_pixel_centers", "is not defined together with align_corners")
    sizes = []
    for arg, d in (("scale_factor_height", x.shape[-2]), ("scale_factor_width", x.shape[-1])):
        scale = call.const(arg, 1)
        if scale <= 0 or math.floor(d * scale) < 1:
            raise call.fail(arg, f"a scale of {scale} leaves nothing of {d}")
        sizes.append(math.floor(d * scale))
    return [TensorType(x.dtype, (*x.shape[:-2], *sizes))]


def nearest_rows(size: int, scale: float) -> np.ndarray:
    """Source row of each output row: floor(i / scale), as the scale is given."""
    out = math.floor(size * scale)
    return np.minimum(np.floor(np.arange(out) / scale).astype(np.int64), size - 1)


def _upsample_nearest(a: Args) -> np.ndarray:
    x = a["x"]
    rows = nearest_rows(x.shape[-2], a.const("scale_factor_height", 1))
    cols = nearest_rows(x.shape[-1], a.const("scale_factor_width", 1))
    return x[..., rows, :][..., cols]


def bilinear_matrix(size: int, out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """[out, size]: the weights each output row takes of the input rows. The sampling grid is
    coremltools' (the scale recomputed from the sizes): align_corners, i · (size-1)/(out-1);
    half-pixel centres, (i + ½) · size/out - ½; otherwise i · size/out; clamped to the input."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        grid = i * ((size - 1) / (out - 1) if out > 1 else 0.0)
    elif half_pixel:
        grid = (i + 0.5) * (size / out) - 0.5
    else:
        grid = i * (size / out)
    grid = np.clip(grid, 0, size - 1)
    low = np.floor(grid).astype(np.int64)
    high = np.minimum(low + 1, size - 1)
    weights = np.zeros((out, size))
    np.add.at(weights, (np.arange(out), low), 1 - (grid - low))
    np.add.at(weights, (np.arange(out), high), grid - low)
    return weights


class ReadsConsts(Protocol):
    """What reads an application's const arguments: a type rule's Call, the executor's Args, a
    Core AI rule's Step."""

    def const(self, arg: str, default: Any = None) -> Any: ...


def bilinear_grids(a: ReadsConsts, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The row and column weight matrices of an upsample_bilinear application."""
    align = bool(a.const("align_corners", True))
    half = bool(a.const("half_pixel_centers", not align))
    h, w = shape[-2:]
    rows = bilinear_matrix(h, math.floor(h * a.const("scale_factor_height", 1)), align, half)
    cols = bilinear_matrix(w, math.floor(w * a.const("scale_factor_width", 1)), align, half)
    return rows, cols


def _upsample_bilinear(a: Args) -> np.ndarray:
    x = a.f64("x")
    rows, cols = bilinear_grids(a, x.shape)
    return rows @ x @ cols.T


# -- resample: x read at per-pixel coordinates ---------------------------------------------------
_SAMPLING = ("bilinear", "nearest")
_PADDING = ("constant", "border", "reflection", "symmetric")
_COORDINATES = ("unnormalized", "normalized_minus_one_to_one", "normalized_zero_to_one")


def _resample_type(call: Call) -> list[TensorType]:
    n, c, _, _ = _rank4(call)
    grid = call.type("coordinates")
    if grid.rank != 4 or grid.shape[0] != n or grid.shape[3] != 2:
        raise call.fail("coordinates", f"needs [{n}, H_out, W_out, 2] (x, y pairs), got {grid}")
    for arg, allowed in (
        ("sampling_mode", _SAMPLING),
        ("padding_mode", _PADDING),
        ("coordinates_mode", _COORDINATES),
    ):
        if call.const(arg) not in allowed:
            raise call.fail(arg, f"{call.const(arg)!r} is not one of {', '.join(allowed)}")
    return [TensorType(call.type("x").dtype, (n, c, grid.shape[1], grid.shape[2]))]


def _pixels(c: np.ndarray, size: int, mode: str, align: bool) -> np.ndarray:
    """Coordinates along an axis of `size` pixels as pixel positions (0 the first pixel's
    centre): normalized ones span the pixels' centres (align_corners) or their outer edges."""
    if mode == "unnormalized":
        return c
    if mode == "normalized_zero_to_one":
        c = 2 * c - 1
    return (c + 1) / 2 * (size - 1) if align else ((c + 1) * size - 1) / 2


def _padded(i: np.ndarray, size: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Pixel indices, any integers, as indices into the axis, and whether each reads the image
    (False: padding_value). reflection mirrors about the edge pixels (|1 2 3| → 2 1 |1 2 3| 2);
    symmetric repeats them (|1 2 3| → 2 1 1 |1 2 3| 3 2)."""
    inside = (i >= 0) & (i < size)
    if mode == "constant":
        return np.clip(i, 0, size - 1), inside
    if mode == "border" or size == 1:
        return np.clip(i, 0, size - 1), np.ones_like(inside)
    if mode == "reflection":
        m = np.mod(i, 2 * (size - 1))
        return np.where(m >= size, 2 * (size - 1) - m, m), np.ones_like(inside)
    m = np.mod(i, 2 * size)
    return np.where(m >= size, 2 * size - 1 - m, m), np.ones_like(inside)


def _resample(a: Args) -> np.ndarray:
    """bilinear: the four pixels around each point, weighted by their nearness; nearest: the
    pixel nearest it (halves to even). A pixel outside the image is the padding's."""
    x, grid = a.f64("x"), a.f64("coordinates")
    n, _, h, w = x.shape
    mode, align = a.const("coordinates_mode"), bool(a.const("align_corners"))
    px = _pixels(grid[..., 0], w, mode, align)
    py = _pixels(grid[..., 1], h, mode, align)
    padding, fill = a.const("padding_mode"), float(a.const("padding_value"))
    batch = np.arange(n).reshape(n, 1, 1)

    def read(iy: np.ndarray, ix: np.ndarray) -> np.ndarray:  # [N, C, H_out, W_out]
        (ry, vy), (rx, vx) = _padded(iy, h, padding), _padded(ix, w, padding)
        values = np.moveaxis(x[batch, :, ry, rx], -1, 1)
        return np.where((vy & vx)[:, None], values, fill)

    if a.const("sampling_mode") == "nearest":
        return read(np.rint(py).astype(np.int64), np.rint(px).astype(np.int64))
    y0, x0 = np.floor(py), np.floor(px)
    fy, fx = (py - y0)[:, None], (px - x0)[:, None]
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    top = read(y0, x0) * (1 - fx) + read(y0, x0 + 1) * fx
    bottom = read(y0 + 1, x0) * (1 - fx) + read(y0 + 1, x0 + 1) * fx
    return top * (1 - fy) + bottom * fy


def _resample_flops(op: Operation) -> int:
    """Per output element: bilinear weighs four pixels (four products, three sums)."""
    size = math.prod(op.outputs[0].tensor.shape)
    mode = op.inputs["sampling_mode"]
    given = None if isinstance(mode, tuple) or mode.op is None else mode.op.value
    return size if given is not None and given.stored() == "nearest" else 7 * size


def _spatial(x: Arg | None = None, **args: Arg) -> dict[str, Arg]:
    return {"x": x or Arg("T"), **args}


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "pad",
        F,
        Form(
            _spatial(
                # a tensor in coremltools; a const here, as the output's shape depends on it
                pad=Arg(INT, const=True),
                mode=Arg(STR, optional=True, const=True),
                constant_val=Arg("T", optional=True, const=True),
            ),
            _pad_type,
            _FLOAT_X,
        ),
        meaning=_pad,
        graph=GraphUse(
            "pad the last len(pad)/2 axes by (before, after) pairs: constant (constant_val), "
            "reflect or replicate",
            0.0,
        ),
        ane=swept(0.00021),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(src.BASE, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "pixel_shuffle",
        F,
        Form(_spatial(upscale_factor=Arg(INT, const=True)), _pixel_shuffle_type, _FLOAT_X),
        meaning=_pixel_shuffle,
        traits=MOVES,
        graph=GraphUse("[N, C·f², H, W] to [N, C, H·f, W·f], channel first (PyTorch's)", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "depth_to_space",
        F,
        Form(_spatial(block_size=Arg(INT, const=True)), _depth_to_space_type, _FLOAT_X),
        meaning=_depth_to_space,
        traits=MOVES,
        graph=GraphUse("[N, C·b², H, W] to [N, C, H·b, W·b], block first (TensorFlow's)", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "space_to_depth",
        F,
        Form(_spatial(block_size=Arg(INT, const=True)), _space_to_depth_type, _FLOAT_X),
        meaning=_space_to_depth,
        traits=MOVES,
        graph=GraphUse("[N, C, H·b, W·b] to [N, C·b², H, W], the inverse of depth_to_space", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "batch_to_space",
        F,
        Form(
            _spatial(block_shape=Arg(INT, const=True), crops=Arg(INT, const=True)),
            _batch_to_space_type,
            _FLOAT_X,
        ),
        meaning=_batch_to_space,
        traits=MOVES,
        graph=GraphUse(
            "[N·bh·bw, C, H, W] to [N, C, H·bh, W·bw], then `crops` [[top, bottom], [left, right]]",
            0.0,
        ),
        ane=swept(0.0),
    ),
    OpRecord(
        "upsample_nearest_neighbor",
        F,
        Form(
            _spatial(scale_factor_height=_SCALE, scale_factor_width=_SCALE),
            _upsample_type,
            _SCALES,
        ),
        meaning=_upsample_nearest,
        traits=MOVES,
        graph=GraphUse(
            "the last two axes scaled by repeating elements: output row i reads row "
            "floor(i / scale)",
            0.0,
        ),
        ane=swept(0.0),
        histogram={17: Seen(src.BASE, src.PUBLISHED)},
    ),
    OpRecord(
        "upsample_bilinear",
        F,
        Form(
            _spatial(
                scale_factor_height=_SCALE,
                scale_factor_width=_SCALE,
                align_corners=Arg(BOOL, optional=True, const=True),
                half_pixel_centers=Arg(BOOL, optional=True, const=True),
            ),
            _upsample_type,
            _SCALES,
        ),
        meaning=_upsample_bilinear,
        graph=GraphUse(
            "the last two axes scaled by bilinear interpolation (align_corners true unless "
            "given; half_pixel_centers: not align_corners)",
            4 * U,
        ),
        ane=swept(),
        histogram={17: Seen(16, src.PUBLISHED)},
    ),
    OpRecord(
        "resample",
        F,
        Form(
            _spatial(
                coordinates=Arg("U"),
                sampling_mode=Arg(STR, const=True),
                padding_mode=Arg(STR, const=True),
                padding_value=Arg("T", const=True),
                coordinates_mode=Arg(STR, const=True),
                align_corners=Arg(BOOL, const=True),
            ),
            _resample_type,
            {"T": FLOATS, "U": frozenset({DType.FP16, DType.FP32, DType.INT32})},
        ),
        meaning=_resample,
        graph=GraphUse(
            "x [N, C, H, W] read at the (x, y) points of coordinates [N, H_out, W_out, 2]: "
            "bilinear or nearest; padding constant, border, reflection or symmetric; coordinates "
            "in pixels or normalized ([-1, 1] or [0, 1]; align_corners: to the corner pixels' "
            "centres)",
            4 * U,
        ),
        flops=_resample_flops,
    ),
)
