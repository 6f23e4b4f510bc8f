"""Op declarations: input names, allowed dtypes, and a type-inference rule, side by side.

Both emitters and the builder read these; an op is declared once. Rules follow the coremltools
iOS17/iOS18 op definitions (input_spec + type_inference) for the subset the kernels use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from app.language.targets import TARGETS, Target
from app.mil import constexpr
from app.mil.call import Call
from app.mil.ir import Input, MILBuildError, OpsetError
from app.mil.types import FLOATS, NUMERIC, DType, StateType, TensorType

INT = frozenset({DType.INT32})
BOOL = frozenset({DType.BOOL})
STR = frozenset({DType.STRING})
ANY_TENSOR = frozenset({DType.FP16, DType.FP32, DType.INT32, DType.BOOL})


@dataclass(frozen=True)
class Arg:
    dtypes: frozenset[DType] | str  # allowed dtypes, or a type-variable name shared by arguments
    optional: bool = False
    const: bool = False  # must be produced by a const op (its value drives type inference)
    variadic: bool = False  # a tuple of vars, spelled `(a, b)`
    state: bool = False  # a state<tensor<...>> parameter


@dataclass(frozen=True)
class OpDef:
    name: str
    args: dict[str, Arg]
    infer: Callable[[Call], list[TensorType]]
    domains: dict[str, frozenset[DType]] = field(default_factory=dict)
    since: str = "ios17"  # the first target whose opset has this op
    until: str | None = None  # last target of a form a later opset replaced (see EARLIER_FORMS)
    # How the arguments are written. "refs": names of vars (every ordinary op). Constexpr ops hold
    # their values themselves, as coremltools serialises them: "inline" as values bound to the
    # inputs (iOS18 declarations), "attributes" in the attribute block with empty parentheses
    # (iOS16 declarations, in any program that uses them).
    form: str = "refs"


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], call: Call) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise call.fail("y", f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db))
    return tuple(reversed(out))


def _elementwise(call: Call) -> list[TensorType]:
    x, y = call.type("x"), call.type("y")
    return [TensorType(x.dtype, _broadcast(x.shape, y.shape, call))]


def _same(call: Call) -> list[TensorType]:
    return [call.type("x")]


def _reduce(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, list(range(x.rank)))
    if call.const("keep_dims", False):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(x.dtype, shape)]


def _softmax(call: Call) -> list[TensorType]:
    call.axes("axis", call.type("x").rank)
    return _same(call)


_CAST_TARGETS = {"fp16": DType.FP16, "fp32": DType.FP32, "int32": DType.INT32, "bool": DType.BOOL}


def _cast(call: Call) -> list[TensorType]:
    name = call.const("dtype")
    if name not in _CAST_TARGETS:
        raise call.fail("dtype", f"cannot cast to {name!r}; one of {sorted(_CAST_TARGETS)}")
    return [TensorType(_CAST_TARGETS[name], call.type("x").shape)]


def _conv(call: Call) -> list[TensorType]:
    x, w = call.type("x"), call.type("weight")
    n_spatial = x.rank - 2
    if n_spatial not in (1, 2, 3) or w.rank != x.rank:
        raise call.fail("weight", f"rank {w.rank} weight for a rank {x.rank} input")
    groups = call.const("groups", 1)
    if groups < 1 or x.shape[1] % groups or w.shape[0] % groups:
        raise call.fail("groups", f"{groups} groups do not divide the channels")
    if x.shape[1] // groups != w.shape[1]:
        raise call.fail(
            "weight", f"C_in / groups = {x.shape[1]}/{groups} != weight[1] ({w.shape[1]})"
        )
    if call.has("bias") and call.type("bias").shape != (w.shape[0],):
        raise call.fail("bias", f"shape {list(call.type('bias').shape)} != [{w.shape[0]}]")
    strides = call.const("strides", [1] * n_spatial)
    dilations = call.const("dilations", [1] * n_spatial)
    pad_type = call.const("pad_type", "valid")
    pad = (
        call.const("pad", [0] * (2 * n_spatial)) if pad_type == "custom" else [0] * (2 * n_spatial)
    )
    if pad_type not in ("valid", "custom", "same"):
        raise call.fail("pad_type", f"{pad_type!r} is not valid, custom or same")
    if len(strides) != n_spatial or len(dilations) != n_spatial or len(pad) != 2 * n_spatial:
        raise call.fail("strides", "strides/dilations/pad lengths do not match the spatial rank")
    if min(strides) < 1 or min(dilations) < 1 or min(pad, default=0) < 0:
        raise call.fail("strides", "strides and dilations must be >= 1 and pads >= 0")
    spatial = []
    for i, size in enumerate(x.shape[2:]):
        if pad_type == "same":
            spatial.append(-(-size // strides[i]))
            continue
        k = dilations[i] * (w.shape[2 + i] - 1) + 1
        out = (size + pad[2 * i] + pad[2 * i + 1] - k) // strides[i] + 1
        if out < 1:
            raise call.fail("weight", f"kernel {k} is larger than the padded input {size}")
        spatial.append(out)
    return [TensorType(x.dtype, (x.shape[0], w.shape[0], *spatial))]


def _matmul(call: Call) -> list[TensorType]:
    x, y = list(call.type("x").shape), list(call.type("y").shape)
    if len(x) < 2 or len(y) < 2:
        raise call.fail("x", "matmul needs tensors of rank >= 2")
    if call.const("transpose_x", False):
        x[-2], x[-1] = x[-1], x[-2]
    if call.const("transpose_y", False):
        y[-2], y[-1] = y[-1], y[-2]
    if x[-1] != y[-2]:
        raise call.fail("y", f"inner dimensions differ: {x[-1]} vs {y[-2]}")
    batch = _broadcast(tuple(x[:-2]), tuple(y[:-2]), call)
    return [TensorType(call.type("x").dtype, (*batch, x[-2], y[-1]))]


def _transpose(call: Call) -> list[TensorType]:
    x = call.type("x")
    perm = call.axes("perm", x.rank)
    if len(perm) != x.rank:
        raise call.fail("perm", f"needs {x.rank} axes, got {len(perm)}")
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm))]


def _reshape(call: Call) -> list[TensorType]:
    x = call.type("x")
    shape = list(call.const("shape"))
    if shape.count(-1) > 1 or any(d == 0 or d < -1 for d in shape):
        raise call.fail("shape", f"invalid target shape {shape}")
    known = math.prod(d for d in shape if d != -1)  # Python ints: no int64 overflow
    if -1 in shape:
        if known == 0 or x.size % known:
            raise call.fail("shape", f"cannot reshape {list(x.shape)} to {shape}")
        shape[shape.index(-1)] = x.size // known
    if math.prod(shape) != x.size:
        raise call.fail("shape", f"cannot reshape {list(x.shape)} to {shape}")
    return [TensorType(x.dtype, tuple(shape))]


def _tile(call: Call) -> list[TensorType]:
    x = call.type("x")
    reps = call.const("reps")
    if len(reps) != x.rank or any(r < 1 for r in reps):
        raise call.fail("reps", f"needs {x.rank} positive repetitions, got {reps}")
    return [TensorType(x.dtype, tuple(d * r for d, r in zip(x.shape, reps, strict=True)))]


def _concat(call: Call) -> list[TensorType]:
    values = call.types("values")
    first = values[0]
    (axis,) = call.axes("axis", first.rank)
    interleave = call.const("interleave", False)
    for v in values[1:]:
        same_rest = all(
            a == b for i, (a, b) in enumerate(zip(v.shape, first.shape, strict=False)) if i != axis
        )
        if v.rank != first.rank or v.dtype != first.dtype or not same_rest:
            raise call.fail("values", f"{v} does not concatenate with {first} on axis {axis}")
        if interleave and v.shape != first.shape:
            raise call.fail("values", "interleave needs equal shapes")
    shape = list(first.shape)
    shape[axis] = sum(v.shape[axis] for v in values)
    return [TensorType(first.dtype, tuple(shape))]


def _slice_by_size(call: Call) -> list[TensorType]:
    x = call.type("x")
    begin, size = call.const("begin"), call.const("size")
    if len(begin) != x.rank or len(size) != x.rank:
        raise call.fail("begin", f"begin and size need {x.rank} entries")
    shape = []
    for d, b, s in zip(x.shape, begin, size, strict=True):
        b = b % d if -d <= b < 0 else b
        s = d - b if s == -1 else s
        if not (0 <= b < d and s >= 1 and b + s <= d):
            raise call.fail("size", f"slice [{b}, {b + s}) is outside a dimension of {d}")
        shape.append(s)
    return [TensorType(x.dtype, tuple(shape))]


def _slice_by_index(call: Call) -> list[TensorType]:
    x = call.type("x")
    begin, end = call.const("begin"), call.const("end")
    stride = call.const("stride", [1] * x.rank)
    masks = {m: call.const(m, [False] * x.rank) for m in ("begin_mask", "end_mask", "squeeze_mask")}
    if any(len(v) != x.rank for v in (begin, end, stride, *masks.values())):
        raise call.fail("begin", f"begin, end, stride and masks need {x.rank} entries")
    shape = []
    for i, d in enumerate(x.shape):
        if stride[i] == 0:
            raise call.fail("stride", "a stride of 0")
        if masks["squeeze_mask"][i]:
            if not -d <= begin[i] < d:
                raise call.fail("begin", f"index {begin[i]} is outside a dimension of {d}")
            continue
        b = None if masks["begin_mask"][i] else begin[i]
        e = None if masks["end_mask"][i] else end[i]
        n = len(range(*slice(b, e, stride[i]).indices(d)))
        if n < 1:
            raise call.fail("end", f"slice [{b}:{e}:{stride[i]}] of a dimension of {d} is empty")
        shape.append(n)
    if not shape:
        raise call.fail("squeeze_mask", "squeezes every dimension away")
    return [TensorType(x.dtype, tuple(shape))]


# Outputs one split may make: far beyond any use, and a bound on the list of types a hostile
# count (num_splits 2^30 of an axis that long) would otherwise make.
MAX_SPLITS = 16384


def _split(call: Call) -> list[TensorType]:
    x = call.type("x")
    (axis,) = call.axes("axis", x.rank)
    sizes, count = call.const("split_sizes"), call.const("num_splits")
    if ((count or 0) if sizes is None else len(sizes)) > MAX_SPLITS:
        raise call.fail("num_splits", f"more than {MAX_SPLITS} outputs")
    if sizes is None:
        if count is None or count < 1 or x.shape[axis] % count:
            raise call.fail("num_splits", f"{count} does not divide a dimension of {x.shape[axis]}")
        sizes = [x.shape[axis] // count] * count
    if any(s < 1 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise call.fail("split_sizes", f"{sizes} do not add up to {x.shape[axis]}")
    if count is not None and count != len(sizes):
        raise call.fail("num_splits", f"{count} splits but {len(sizes)} sizes")
    shapes = [list(x.shape) for _ in sizes]
    for shape, size in zip(shapes, sizes, strict=True):
        shape[axis] = size
    return [TensorType(x.dtype, tuple(shape)) for shape in shapes]


_GELU_MODES = ("EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION")


def _gelu(call: Call) -> list[TensorType]:
    if call.const("mode", "EXACT") not in _GELU_MODES:
        raise call.fail("mode", f"one of {', '.join(_GELU_MODES)}")
    return _same(call)


def _expand_dims(call: Call) -> list[TensorType]:
    x = call.type("x")
    rank = x.rank + len(call.const("axes"))
    axes = call.axes("axes", rank)
    dims = iter(x.shape)
    return [TensorType(x.dtype, tuple(1 if i in axes else next(dims) for i in range(rank)))]


def _squeeze(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, [i for i, d in enumerate(x.shape) if d == 1])
    if any(x.shape[a] != 1 for a in axes):
        raise call.fail("axes", f"can only squeeze dimensions of size 1 in {list(x.shape)}")
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


def _sdpa(call: Call) -> list[TensorType]:
    q, k, v = call.type("query"), call.type("key"), call.type("value")
    if q.rank < 3 or k.rank != q.rank or v.rank != q.rank:
        raise call.fail("query", "query, key and value need the same rank, at least 3")
    if q.shape[-1] != k.shape[-1]:
        raise call.fail("key", f"embedding {k.shape[-1]} != query embedding {q.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise call.fail("value", f"length {v.shape[-2]} != key length {k.shape[-2]}")
    batch = _broadcast(q.shape[:-2], _broadcast(k.shape[:-2], v.shape[:-2], call), call)
    if call.has("attn_mask"):
        _broadcast(call.type("attn_mask").shape, (*batch, q.shape[-2], k.shape[-2]), call)
    return [TensorType(q.dtype, (*batch, q.shape[-2], v.shape[-1]))]


def _read_state(call: Call) -> list[TensorType]:
    return [call.type("input")]


def _write_state(call: Call) -> list[TensorType]:
    if call.type("data") != call.type("input"):
        raise call.fail(
            "data", f"{call.type('data')} does not match the state {call.type('input')}"
        )
    return []


def _slice_update(call: Call) -> list[TensorType]:
    """x with update written into x[begin:end:stride]; begin and end may be runtime values (a
    KV cache written at the current length), so only ranks and dtypes are checked here."""
    x, update = call.type("x"), call.type("update")
    for arg in ("begin", "end"):
        if call.type(arg).shape != (x.rank,):
            raise call.fail(arg, f"needs one index per axis of x: shape [{x.rank}]")
    if update.rank != x.rank or any(u > d for u, d in zip(update.shape, x.shape, strict=True)):
        raise call.fail("update", f"{update} does not fit into {x}")
    return [x]


def _declare(*defs: OpDef) -> dict[str, OpDef]:
    return {d.name: d for d in defs}


_T = {"T": FLOATS}
_X = {"x": Arg("T")}
_XY = {"x": Arg("T"), "y": Arg("T")}
_REDUCE = {
    "x": Arg("T"),
    "axes": Arg(INT, optional=True, const=True),
    "keep_dims": Arg(BOOL, optional=True, const=True),
}
_NUM = {"T": NUMERIC}

OPS: dict[str, OpDef] = _declare(
    OpDef("cast", {"x": Arg(ANY_TENSOR), "dtype": Arg(STR, const=True)}, _cast),
    OpDef(
        "conv",
        {
            "x": Arg("T"),
            "weight": Arg("U"),
            "bias": Arg("U", optional=True),
            "strides": Arg(INT, optional=True, const=True),
            "pad_type": Arg(STR, optional=True, const=True),
            "pad": Arg(INT, optional=True, const=True),
            "dilations": Arg(INT, optional=True, const=True),
            "groups": Arg(INT, optional=True, const=True),
        },
        _conv,
        {"T": FLOATS, "U": FLOATS},
    ),
    OpDef(
        "matmul",
        {
            "x": Arg("T"),
            "y": Arg("T"),
            "transpose_x": Arg(BOOL, optional=True, const=True),
            "transpose_y": Arg(BOOL, optional=True, const=True),
        },
        _matmul,
        _NUM,
    ),
    *(
        OpDef(name, _XY, _elementwise, _NUM)
        for name in ("add", "sub", "mul", "real_div", "maximum", "minimum")
    ),
    OpDef("abs", _X, _same, _NUM),
    *(OpDef(name, _X, _same, _T) for name in ("sigmoid", "silu", "relu", "tanh", "exp")),
    OpDef("gelu", {"x": Arg("T"), "mode": Arg(STR, optional=True, const=True)}, _gelu, _T),
    OpDef("square", _X, _same, _NUM),
    OpDef("sqrt", _X, _same, _T),
    OpDef("rsqrt", {"x": Arg("T"), "epsilon": Arg("T", optional=True, const=True)}, _same, _T),
    *(OpDef(f"reduce_{k}", _REDUCE, _reduce, _NUM) for k in ("max", "mean", "sum")),
    OpDef("reduce_l2_norm", _REDUCE, _reduce, _T),
    OpDef("softmax", {"x": Arg("T"), "axis": Arg(INT, optional=True, const=True)}, _softmax, _T),
    OpDef("transpose", {"x": Arg(ANY_TENSOR), "perm": Arg(INT, const=True)}, _transpose),
    OpDef("reshape", {"x": Arg(ANY_TENSOR), "shape": Arg(INT, const=True)}, _reshape),
    OpDef("tile", {"x": Arg(ANY_TENSOR), "reps": Arg(INT, const=True)}, _tile),
    OpDef(
        "concat",
        {
            "values": Arg(ANY_TENSOR, variadic=True),
            "axis": Arg(INT, const=True),
            "interleave": Arg(BOOL, optional=True, const=True),
        },
        _concat,
    ),
    OpDef(
        "slice_by_size",
        {"x": Arg(ANY_TENSOR), "begin": Arg(INT, const=True), "size": Arg(INT, const=True)},
        _slice_by_size,
    ),
    OpDef(
        "slice_by_index",
        {
            "x": Arg(ANY_TENSOR),
            "begin": Arg(INT, const=True),
            "end": Arg(INT, const=True),
            "stride": Arg(INT, optional=True, const=True),
            "begin_mask": Arg(BOOL, optional=True, const=True),
            "end_mask": Arg(BOOL, optional=True, const=True),
            "squeeze_mask": Arg(BOOL, optional=True, const=True),
        },
        _slice_by_index,
    ),
    OpDef(
        "split",
        {
            "x": Arg(ANY_TENSOR),
            "num_splits": Arg(INT, optional=True, const=True),
            "split_sizes": Arg(INT, optional=True, const=True),
            "axis": Arg(INT, const=True),
        },
        _split,
    ),
    OpDef("expand_dims", {"x": Arg(ANY_TENSOR), "axes": Arg(INT, const=True)}, _expand_dims),
    OpDef("squeeze", {"x": Arg(ANY_TENSOR), "axes": Arg(INT, optional=True, const=True)}, _squeeze),
    OpDef(
        "scaled_dot_product_attention",
        {
            "query": Arg("T"),
            "key": Arg("T"),
            "value": Arg("T"),
            "attn_mask": Arg(FLOATS | BOOL, optional=True),
        },
        _sdpa,
        _T,
        since="ios18",
    ),
    OpDef(
        "slice_update",
        {
            "x": Arg("T"),
            "update": Arg("T"),
            "begin": Arg(INT),
            "end": Arg(INT),
            "stride": Arg(INT, optional=True, const=True),
        },
        _slice_update,
        {"T": ANY_TENSOR},
        since="ios18",
    ),
    OpDef("read_state", {"input": Arg(FLOATS, state=True)}, _read_state, since="ios18"),
    OpDef(
        "write_state",
        {"input": Arg(FLOATS, state=True), "data": Arg(FLOATS)},
        _write_state,
        since="ios18",
    ),
)


# -- compressed weights (rules in app.mil.constexpr) -------------------------------------------
_U1, _U8, _U32 = frozenset({DType.UINT1}), frozenset({DType.UINT8}), frozenset({DType.UINT32})
_BYTE_INTS = frozenset({DType.INT8, DType.UINT8})
_LUT_VALUES = _BYTE_INTS | FLOATS
_SHIFTED = _LUT_VALUES | {DType.INT4, DType.UINT4}
_INDICES = frozenset({DType.UINT1, DType.UINT2, DType.UINT3, DType.UINT4, DType.UINT6, DType.UINT8})
_SHIFT_SCALE = {"SrcT": _SHIFTED, "DstT": FLOATS, "OffsetT": _SHIFTED}

OPS.update(
    _declare(
        OpDef(
            "constexpr_affine_dequantize",
            {
                "quantized_data": Arg("SrcT", const=True),
                "zero_point": Arg("ZeroPointT", const=True),
                "scale": Arg("DstT", const=True),
                "axis": Arg(INT, const=True),
            },
            constexpr.affine_dequantize,
            {"SrcT": _BYTE_INTS, "ZeroPointT": _BYTE_INTS | {DType.FP32}, "DstT": FLOATS},
            since="ios17",  # an iOS16 op: in every target built here
            form="attributes",
        ),
        OpDef(
            "constexpr_blockwise_shift_scale",
            {"data": Arg("SrcT"), "scale": Arg("DstT"), "offset": Arg("OffsetT", optional=True)},
            constexpr.blockwise_shift_scale,
            _SHIFT_SCALE,
            since="ios18",
            form="inline",
        ),
        OpDef(
            "constexpr_lut_to_dense",
            {
                "indices": Arg("IndicesT"),
                "lut": Arg("T"),
                "vector_axis": Arg(INT, optional=True, const=True),
            },
            constexpr.lut_to_dense,
            {"IndicesT": _INDICES, "T": _LUT_VALUES},
            since="ios18",
            form="inline",
        ),
        OpDef(
            "constexpr_sparse_to_dense",
            {"nonzero_data": Arg("T"), "mask": Arg(_U1)},
            constexpr.sparse_to_dense,
            {"T": _SHIFTED},
            since="ios18",
            form="inline",
        ),
        OpDef(
            "constexpr_sparse_blockwise_shift_scale",
            {
                "data_mask": Arg(_U1),
                "nonzero_data": Arg("SrcT"),
                "scale": Arg("DstT"),
                "offset": Arg("OffsetT", optional=True),
            },
            constexpr.sparse_blockwise_shift_scale,
            _SHIFT_SCALE,
            since="ios18",
            form="inline",
        ),
    )
)

# Forms an opset replaced under the same name: targets up to `until` use these (iOS16 signatures).
EARLIER_FORMS: dict[str, OpDef] = _declare(
    OpDef(
        "constexpr_lut_to_dense",
        {
            "indices": Arg(_U8, const=True),
            "lut": Arg("T", const=True),
            "shape": Arg(_U32, const=True),
        },
        constexpr.lut_to_dense_ios16,
        {"T": _LUT_VALUES},
        since="ios17",  # an iOS16 op: in every target built here
        until="ios17",
        form="attributes",
    ),
    OpDef(
        "constexpr_sparse_to_dense",
        {
            "nonzero_data": Arg("T", const=True),
            "mask": Arg(_U8, const=True),
            "shape": Arg(_U32, const=True),
        },
        constexpr.sparse_to_dense_ios16,
        {"T": _LUT_VALUES},
        since="ios17",  # an iOS16 op: in every target built here
        until="ios17",
        form="attributes",
    ),
)


def lookup(op_type: str, target: Target) -> OpDef | None:
    """The declaration of `op_type` in a target's opset (an earlier form where one applies)."""
    earlier = EARLIER_FORMS.get(op_type)
    if earlier is not None and earlier.until and target.order <= TARGETS[earlier.until].order:
        return earlier
    return OPS.get(op_type)


def infer(op_type: str, name: str, inputs: dict[str, Input], target: Target) -> list[TensorType]:
    """Check an op application against its declaration and return its output types."""
    opdef = lookup(op_type, target)
    if opdef is None:
        raise MILBuildError(f"{op_type} {name}", None, f"unknown op type {op_type!r}")
    call = Call(opdef.name, name, inputs)
    if not target.includes(opdef.since):
        raise OpsetError(
            f"{op_type} {name}", None, f"not in the {target} opset (available from {opdef.since})"
        )
    for arg in inputs:
        if arg not in opdef.args:
            raise call.fail(arg, f"unknown argument; expected {', '.join(opdef.args)}")
    bound: dict[str, DType] = {}
    for arg, spec in opdef.args.items():
        if arg not in inputs:
            if not spec.optional:
                raise call.fail(arg, "required argument is missing")
            continue
        _check_arg(call, opdef, arg, spec, inputs[arg], bound)
    try:
        return opdef.infer(call)
    except MILBuildError:
        raise
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError) as exc:
        # A rule reads its const arguments as the op defines them (a scalar axis, a list of
        # reps); one given in another form (a list for a scalar, a nested list) lands here.
        raise call.fail(None, f"an argument is not of the form the op takes: {exc}") from None


def _check_arg(
    call: Call, opdef: OpDef, arg: str, spec: Arg, value: Input, bound: dict[str, DType]
) -> None:
    if spec.variadic != isinstance(value, tuple):
        raise call.fail(arg, "expects a tuple of values" if spec.variadic else "expects one value")
    for var in value if isinstance(value, tuple) else (value,):
        if spec.state != isinstance(var.type, StateType):
            raise call.fail(arg, f"expects a {'state' if spec.state else 'tensor'}, got {var.type}")
        if spec.const and (var.op is None or var.op.type != "const"):
            raise call.fail(arg, f"must be a const, got {var.name!r}")
        dtype = var.tensor.dtype
        if isinstance(spec.dtypes, str):
            allowed = opdef.domains.get(spec.dtypes, ANY_TENSOR)
            if bound.setdefault(spec.dtypes, dtype) != dtype:
                raise call.fail(arg, f"dtype {dtype.value} differs from {bound[spec.dtypes].value}")
        else:
            allowed = spec.dtypes
        if dtype not in allowed:
            names = ", ".join(sorted(d.value for d in allowed))
            raise call.fail(arg, f"dtype {dtype.value} is not allowed (expected {names})")
