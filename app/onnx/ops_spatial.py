"""Lowerings of ONNX's spatial ops: Pad, the pools (AveragePool, MaxPool, LpPool),
ConvTranspose, DepthToSpace, SpaceToDepth, Resize and GridSample (RoiAlign: app/onnx/ops_roi.py).

ONNX lists pads as every start then every end; MIL pairs them per axis. LpPool is a sum pool
(an average over a window that counts its padding, times the window's size) of |x| (p = 1) or
x² then √ (p = 2). DepthToSpace's DCR order is MIL's depth_to_space, its CRD order MIL's
pixel_shuffle. Resize, nearest-neighbour: the source row of each output row is known at import,
so the op is MIL's upsample_nearest_neighbor (source row floor(i / scale): ONNX's for
asymmetric coordinates rounded down, and for half-pixel ones rounded to nearest at a whole
scale) where that reads ONNX's rows, else a gather of them on each axis that moves; linear, on
the last two axes, upsample_bilinear.
GridSample is MIL's resample with the grid as normalized coordinates: its zeros padding the
constant 0, and its reflection, which mirrors the coordinate about the outer pixels' centres
(align_corners) or their edges, resample's reflection or symmetric padding.
"""

from __future__ import annotations

import math

import numpy as np

from app.errors import RequestError
from app.mil import Var
from app.mil.ops.spatial import nearest_rows
from app.onnx.lowering import Handler, Lowering, Node, Unlowered, Value


def _text(node: Node, name: str, default: str) -> str:
    value = node.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _paired(pads: list[int], n: int) -> list[int]:
    """ONNX's [starts..., ends...] as MIL's [before, after] per axis."""
    return [p for i in range(n) for p in (pads[i], pads[i + n])]


def pad(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    rank = x.tensor.rank
    given = node.ints(1, "pads")
    axes = node.ints(3, "axes") if node.input(3) is not None else list(range(rank))
    axes = [node.axis(a, rank) for a in axes]
    if len(given) != 2 * len(axes):
        raise RequestError(node.field, f"Pad node {node.label!r}: {len(given)} pads for {axes}")
    before, after = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        before[axis], after[axis] = given[i], given[i + len(axes)]
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}.get(
        _text(node, "mode", "constant")
    )
    if mode is None:
        raise Unlowered(f"pad mode {_text(node, 'mode', '')!r} (MIL pads constant, reflect, edge)")
    if not x.tensor.dtype.is_float:
        raise Unlowered("pad of integers (MIL's pad takes floats)")
    value = node.known(2, "constant value")
    grow = [(max(b, 0), max(a, 0)) for b, a in zip(before, after, strict=True)]
    first = next((i for i, (b, a) in enumerate(grow) if b or a), None)
    y = x
    if first is not None:
        args = {
            "x": x,
            "pad": np.array([p for b, a in grow[first:] for p in (b, a)], np.int32),
            "mode": mode,
        }
        if mode == "constant" and value is not None and value.size:
            args["constant_val"] = np.array(float(value.reshape(-1)[0]), np.float32)
        crops = any(b < 0 or a < 0 for b, a in zip(before, after, strict=True))
        y = ctx.op("pad", None if crops else node.out[0], **args)
    if any(b < 0 or a < 0 for b, a in zip(before, after, strict=True)):  # negative pads crop
        shape = y.tensor.shape
        begin = [-min(b, 0) for b in before]
        end = [d + min(a, 0) for d, a in zip(shape, after, strict=True)]
        y = ctx.op(
            "slice_by_index",
            node.out[0],
            x=y,
            begin=np.array(begin, np.int32),
            end=np.array(end, np.int32),
        )
    return [y]


def _pool_args(node: Node, x: Var) -> dict:
    n = x.tensor.rank - 2
    kernel = list(node.attr("kernel_shape"))
    if any(d != 1 for d in node.attr("dilations") or []):
        raise Unlowered("pool dilations other than 1 (MIL's pools take none)")
    auto = _text(node, "auto_pad", "NOTSET")
    args = {
        "x": x,
        "kernel_sizes": np.array(kernel, np.int32),
        "strides": np.array(node.attr("strides") or [1] * n, np.int32),
        "ceil_mode": bool(node.attr("ceil_mode", 0)),
    }
    if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        args["pad_type"] = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower"}.get(auto, "valid")
    else:
        args["pad_type"] = "custom"
        args["pad"] = np.array(_paired(list(node.attr("pads") or [0] * (2 * n)), n), np.int32)
    return args


def pool(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    args = _pool_args(node, x)
    sizes = _onnx_sizes(x, args)
    name = node.out[0] if sizes is None else None
    if node.op_type == "MaxPool":
        y = ctx.op("max_pool", name, **args)
    else:
        exclude = not node.attr("count_include_pad", 0)
        y = ctx.op("avg_pool", name, exclude_padding_from_average=exclude, **args)
    if sizes is None:
        return [y]
    end = [*y.tensor.shape[:2], *sizes]
    return [
        ctx.op(
            "slice_by_index",
            node.out[0],
            x=y,
            begin=np.zeros(len(end), np.int32),
            end=np.array(end, np.int32),
        )
    ]


def _onnx_sizes(x: Var, args: dict) -> list[int] | None:
    """In ceil mode ONNX drops a last window that would start past the input and its leading
    pads (the operator's spec; onnxruntime and PyTorch size it so); MIL drops it only where
    there are pads (coremltools' rule, app/mil/ops/windows.py). Without pads, where that leaves
    MIL a window more (a kernel smaller than its stride): ONNX's sizes, to slice it off; else
    None."""
    pads = [int(p) for p in args.get("pad", ())]
    if not args["ceil_mode"] or args["pad_type"] not in ("custom", "valid") or any(pads):
        return None
    sizes, dropped = [], False
    for size, k, s in zip(x.tensor.shape[2:], args["kernel_sizes"], args["strides"], strict=True):
        out = -(-(size - int(k)) // int(s)) + 1  # MIL's, without pads
        if (out - 1) * int(s) >= size:  # the last window starts past the input
            out, dropped = out - 1, True
        sizes.append(out)
    return sizes if dropped else None


def lp_pool(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise Unlowered(f"LpPool with p = {p} (lowered for p = 1 and 2)")
    args = _pool_args(node, x)
    if args["ceil_mode"]:
        raise Unlowered("LpPool in ceil mode (its last windows would not sum the whole kernel)")
    size = float(np.prod(args["kernel_sizes"]))
    powered = ctx.op("abs" if p == 1 else "square", x=x)
    mean = ctx.op("avg_pool", exclude_padding_from_average=False, **{**args, "x": powered})
    total = ctx.op("mul", node.out[0] if p == 1 else None, x=mean, y=np.array(size, np.float32))
    return [total if p == 1 else ctx.op("sqrt", node.out[0], x=total)]


def conv_transpose(ctx: Lowering, node: Node) -> list[Value]:
    from app.onnx.ops_nn import _operand

    x = node.var(0)
    w = _operand(ctx, node.given(1), node.proto.input[1])
    n = x.tensor.rank - 2
    strides = list(node.attr("strides") or [1] * n)
    dilations = list(node.attr("dilations") or [1] * n)
    groups = int(node.attr("group", 1))
    extra = list(node.attr("output_padding") or [0] * n)
    kernel = [d * (k - 1) + 1 for k, d in zip(w.tensor.shape[2:], dilations, strict=True)]
    full = [
        (size - 1) * s + k + e
        for size, s, k, e in zip(x.tensor.shape[2:], strides, kernel, extra, strict=True)
    ]
    auto = _text(node, "auto_pad", "NOTSET")
    wanted = node.attr("output_shape")
    if wanted is not None:
        sizes = list(wanted)[-n:]
        totals = [f - o for f, o in zip(full, sizes, strict=True)]
        if min(totals) < 0:
            raise RequestError(
                node.field, f"ConvTranspose node {node.label!r}: output_shape {list(wanted)}"
            )
        upper = auto == "SAME_UPPER"  # onnxruntime: the larger half first unless SAME_UPPER
        pads = [t // 2 if upper else t - t // 2 for t in totals]
        pads += [t - p for t, p in zip(totals, pads, strict=True)]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        totals = [
            f - size * s for f, size, s in zip(full, x.tensor.shape[2:], strides, strict=True)
        ]
        lower = auto == "SAME_LOWER"
        pads = [t - t // 2 if lower else t // 2 for t in totals]
        pads += [t - p for t, p in zip(totals, pads, strict=True)]
    elif auto == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = list(node.attr("pads") or [0] * (2 * n))
    sizes = [f - pads[i] - pads[i + n] for i, f in enumerate(full)]
    c_out = w.tensor.shape[1] * groups
    args = {
        "x": x,
        "weight": w,
        "strides": np.array(strides, np.int32),
        "dilations": np.array(dilations, np.int32),
        "groups": np.array(groups, np.int32),
        "pad_type": "custom",
        "pad": np.array(_paired(pads, n), np.int32),
        "output_shape": np.array([x.tensor.shape[0], c_out, *sizes], np.int32),
    }
    bias = node.input(2)
    if bias is not None:
        args["bias"] = _operand(ctx, bias, node.proto.input[2])
    return [ctx.op("conv_transpose", node.out[0], **args)]


def depth_to_space(ctx: Lowering, node: Node) -> list[Value]:
    x, block = node.var(0), int(node.attr("blocksize"))
    if _text(node, "mode", "DCR") == "CRD":
        return [ctx.op("pixel_shuffle", node.out[0], x=x, upscale_factor=block)]
    return [ctx.op("depth_to_space", node.out[0], x=x, block_size=block)]


def space_to_depth(ctx: Lowering, node: Node) -> list[Value]:
    x, block = node.var(0), int(node.attr("blocksize"))
    return [ctx.op("space_to_depth", node.out[0], x=x, block_size=block)]


def _nearest(
    ctx: Lowering,
    node: Node,
    x: Var,
    out: list[int],
    scales: list[float],
    coords: str,
    rounding: str,
) -> Var:
    """Nearest-neighbour Resize: the input row ONNX reads for each output row, axis by axis
    (the coordinates `_nearest_rows` lowers, any rounding, scale or axes; antialias does not
    apply to nearest). MIL's upsample_nearest_neighbor where it reads the same rows of the last
    two axes (floor(i / scale), its scale in fp32), else a gather per axis that moves."""
    shape = list(x.tensor.shape)
    if out == shape:  # onnxruntime copies the input, whatever the scales
        return ctx.op("identity", node.out[0], x=x)
    rows = []
    for size, resized, scale in zip(shape, out, scales, strict=True):
        # an axis of scale 1 keeps its rows, in onnxruntime, whatever the coordinates say
        picked = (
            np.arange(size)
            if scale == 1.0
            else _nearest_rows(size, resized, scale, coords, rounding)
        )
        if picked is None:
            raise Unlowered(f"nearest Resize with {coords} coordinates rounded {rounding}")
        rows.append(picked)
    moved = [a for a, r in enumerate(rows) if not np.array_equal(r, np.arange(shape[a]))]
    if len(shape) >= 3 and min(moved) >= len(shape) - 2:
        factors = [float(np.float32(s)) for s in scales[-2:]]  # the op stores them in fp32
        upsampled = [nearest_rows(d, f) for d, f in zip(shape[-2:], factors, strict=True)]
        if all(np.array_equal(u, r) for u, r in zip(upsampled, rows[-2:], strict=True)):
            return ctx.op(
                "upsample_nearest_neighbor",
                node.out[0],
                x=x,
                scale_factor_height=factors[0],
                scale_factor_width=factors[1],
            )
    y = x
    for k, axis in enumerate(moved):
        name = node.out[0] if k == len(moved) - 1 else None
        y = ctx.op("gather", name, x=y, indices=rows[axis].astype(np.int32), axis=axis)
    return y


def _nearest_rows(
    size: int, resized: int, scale: float, coords: str, rounding: str
) -> np.ndarray | None:
    """For each output row along an axis, the input row ONNX's nearest Resize reads: its
    coordinate transformation and rounding in float32, as onnxruntime computes them; None for a
    transformation not lowered: tf_crop_and_resize (it reads a region of interest), and
    half_pixel_symmetric (onnxruntime's rows differ from the operator's formula in float32 where
    it shrinks an axis, so neither could be matched exactly)."""
    i = np.arange(resized, dtype=np.float32)
    s, half = np.float32(scale), np.float32(0.5)
    if coords in ("half_pixel", "pytorch_half_pixel"):
        x = (i + half) / s - half
        if coords == "pytorch_half_pixel" and resized == 1:
            x = np.zeros_like(i)
    elif coords == "asymmetric":
        x = i / s
    elif coords == "tf_half_pixel_for_nn":
        x = (i + half) / s
    elif coords == "align_corners":
        x = np.zeros_like(i) if resized == 1 else i * np.float32(size - 1) / np.float32(resized - 1)
    else:
        return None
    low = np.floor(x)
    fraction = x - low
    picked = {
        "floor": low,
        "ceil": np.ceil(x),
        "round_prefer_ceil": low + (fraction >= half),
        "round_prefer_floor": low + (fraction > half),
    }.get(rounding)
    if picked is None:
        return None
    return np.clip(picked, 0, size - 1).astype(np.int64)


def _one_per_axis(node: Node, what: str, values: list, axes: list[int]) -> None:
    if len(values) != len(axes):
        raise RequestError(
            node.field,
            f"Resize node {node.label!r}: {len(values)} {what} for {len(axes)} axes",
        )


def resize(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    rank = x.tensor.rank
    shape = list(x.tensor.shape)
    scales_in = node.known(2, "scales")
    sizes_in = node.known(3, "sizes")
    axes = [node.axis(a, rank) for a in (node.attr("axes") or range(rank))]
    scales = [1.0] * rank
    out = list(shape)
    if sizes_in is not None and sizes_in.size:
        policy = _text(node, "keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            raise Unlowered(f"Resize with keep_aspect_ratio_policy {policy!r}")
        sizes = node.ints(3, "sizes")
        _one_per_axis(node, "sizes", sizes, axes)
        for axis, size in zip(axes, sizes, strict=True):
            out[axis], scales[axis] = size, size / shape[axis]
    elif scales_in is not None and scales_in.size:
        factors = [float(s) for s in scales_in.reshape(-1)]
        _one_per_axis(node, "scales", factors, axes)
        for axis, scale in zip(axes, factors, strict=True):
            scales[axis], out[axis] = scale, math.floor(shape[axis] * scale)
    else:
        raise RequestError(node.field, f"Resize node {node.label!r}: neither scales nor sizes")
    if min(out) < 1:
        raise RequestError(
            node.field,
            f"Resize node {node.label!r}: to {out}, an empty tensor (a program holds none)",
        )
    mode = _text(node, "mode", "nearest")
    coords = _text(node, "coordinate_transformation_mode", "half_pixel")
    if mode == "nearest":
        rounding = _text(node, "nearest_mode", "round_prefer_floor")
        return [_nearest(ctx, node, x, out, scales, coords, rounding)]
    if out[:-2] != shape[:-2] or rank < 3:
        raise Unlowered("Resize of other axes than the last two (MIL's upsamplings scale H and W)")
    if node.attr("antialias", 0) and min(scales[-2:]) < 1:
        raise Unlowered("Resize with antialias when it shrinks")
    sh, sw = scales[-2:]
    if mode != "linear":
        raise Unlowered(f"Resize mode {mode!r} (lowered: nearest, linear)")
    flags = {
        "half_pixel": (False, True),
        "pytorch_half_pixel": (False, True),
        "align_corners": (True, False),
        "asymmetric": (False, False),
    }.get(coords)
    if flags is None or (coords == "pytorch_half_pixel" and min(out[-2:]) == 1):
        raise Unlowered(f"linear Resize with {coords} coordinates")
    if any(not (d * s).is_integer() for d, s in zip(shape[-2:], (sh, sw), strict=True)):
        raise Unlowered("linear Resize to a fractional size (MIL's grid is the sizes' ratio)")
    factors = []
    for d, o in zip(shape[-2:], out[-2:], strict=True):
        f = np.float32(o / d)
        while math.floor(d * float(f)) < o:  # the float32 ratio may land below the size
            f = np.nextafter(f, np.float32(np.inf))
        factors.append(float(f))
    return [
        ctx.op(
            "upsample_bilinear",
            node.out[0],
            x=x,
            scale_factor_height=factors[0],
            scale_factor_width=factors[1],
            align_corners=flags[0],
            half_pixel_centers=flags[1],
        )
    ]


def grid_sample(ctx: Lowering, node: Node) -> list[Value]:
    """GridSample (opset 16: bilinear, nearest, bicubic; from 20: linear, nearest, cubic, and
    any rank) of a 4-D input."""
    x, grid = node.var(0), node.given(1)
    mode = _text(node, "mode", "bilinear" if ctx.model.opset < 20 else "linear")
    sampling = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest"}.get(mode)
    if sampling is None:
        raise Unlowered(f"GridSample mode {mode!r} (MIL's resample: linear and nearest)")
    if x.tensor.rank != 4:
        raise Unlowered(f"GridSample of a rank-{x.tensor.rank} input (MIL's resample is 2-D)")
    align = bool(node.attr("align_corners", 0))
    padding = _text(node, "padding_mode", "zeros")
    mil_padding = {
        "zeros": "constant",
        "border": "border",
        "reflection": "reflection" if align else "symmetric",
    }.get(padding)
    if mil_padding is None:
        raise Unlowered(f"GridSample padding_mode {padding!r}")
    return [
        ctx.op(
            "resample",
            node.out[0],
            x=x,
            coordinates=grid,
            sampling_mode=sampling,
            padding_mode=mil_padding,
            padding_value=np.array(0.0, np.float32),
            coordinates_mode="normalized_minus_one_to_one",
            align_corners=align,
        )
    ]


HANDLERS: dict[str, Handler] = {
    "Pad": pad,
    "AveragePool": pool,
    "MaxPool": pool,
    "LpPool": lp_pool,
    "ConvTranspose": conv_transpose,
    "DepthToSpace": depth_to_space,
    "SpaceToDepth": space_to_depth,
    "Resize": resize,
    "GridSample": grid_sample,
}
