"""Op declarations: input names, allowed dtypes, and the type-inference rule (app/mil/inference.py)
of each, side by side.

Both emitters and the builder read these; an op is declared once. Rules follow the coremltools
iOS17/iOS18 op definitions (input_spec + type_inference) for the subset the kernels use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from app.language.targets import TARGETS, Target
from app.mil import constexpr
from app.mil.call import Call
from app.mil.inference import (
    _cast,
    _concat,
    _conv,
    _elementwise,
    _expand_dims,
    _gelu,
    _matmul,
    _read_state,
    _reduce,
    _reshape,
    _same,
    _sdpa,
    _slice_by_index,
    _slice_by_size,
    _slice_update,
    _softmax,
    _split,
    _squeeze,
    _tile,
    _transpose,
    _write_state,
)
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
