"""Matrix products, and attention built on them (coremltools `linear.py`, iOS18
`transformers.py`; convolutions are app/mil/ops/conv.py). Their cost counts multiply-adds twice:
matmul, linear and einsum `2 · out · K`."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation, Var
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_T, NUMERIC_T, U, broadcast, operand, softmax, swept
from app.mil.ops.record import (
    BOOL,
    STR,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
    Trait,
    output_flops,
)
from app.mil.types import FLOATS, NUMERIC, TensorType

F = Family.LINEAR
PRODUCT = frozenset({Trait.COMPOUNDING})


def _matmul_type(call: Call) -> list[TensorType]:
    x, y = list(call.type("x").shape), list(call.type("y").shape)
    if len(x) < 2 or len(y) < 2:
        raise call.fail("x", "matmul needs tensors of rank >= 2")
    if call.const("transpose_x", False):
        x[-2], x[-1] = x[-1], x[-2]
    if call.const("transpose_y", False):
        y[-2], y[-1] = y[-1], y[-2]
    if x[-1] != y[-2]:
        raise call.fail("y", f"inner dimensions differ: {x[-1]} vs {y[-2]}")
    batch = broadcast(tuple(x[:-2]), tuple(y[:-2]), call)
    return [TensorType(call.type("x").dtype, (*batch, x[-2], y[-1]))]


def _matmul(a: Args) -> np.ndarray:
    x, y = a.f64("x"), a.f64("y")
    if a.const("transpose_x", False):
        x = np.swapaxes(x, -1, -2)
    if a.const("transpose_y", False):
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _matmul_flops(op: Operation) -> int:
    x = op.inputs["x"]
    assert isinstance(x, Var)
    flag = op.inputs.get("transpose_x")
    transposed = bool(
        flag is not None
        and not isinstance(flag, tuple)
        and flag.op is not None
        and flag.op.value is not None
        and flag.op.value.stored()
    )
    shape = x.tensor.shape
    k = shape[-2] if transposed and len(shape) > 1 else shape[-1]
    return 2 * output_flops(op) * k


def _linear_flops(op: Operation) -> int:
    return 2 * output_flops(op) * operand(op, "weight").tensor.shape[-1]


def _linear_type(call: Call) -> list[TensorType]:
    x, w = call.type("x"), call.type("weight")
    if not 1 <= x.rank <= 3:
        raise call.fail("x", f"needs rank 1 to 3, got {x}")
    if w.rank != 2 or w.shape[1] != x.shape[-1]:
        raise call.fail("weight", f"needs [D_out, {x.shape[-1]}], got {w}")
    if call.has("bias") and call.type("bias").shape != (w.shape[0],):
        raise call.fail("bias", f"needs [{w.shape[0]}], got {call.type('bias')}")
    return [TensorType(x.dtype, (*x.shape[:-1], w.shape[0]))]


def _linear(a: Args) -> np.ndarray:
    y = np.matmul(a.f64("x"), a.f64("weight").T)
    return y + a.f64("bias") if a.has("bias") else y


# The two equations coremltools' einsum takes, as letters numbered by first appearance:
# "nchw,nwhu->nchu" (rank 4) and "chw,whr->chr" (rank 3), any letters.
_EINSUM_FORMS = {
    4: ([0, 1, 2, 3], [0, 3, 2, 4], [0, 1, 2, 4]),
    3: ([0, 1, 2], [2, 1, 3], [0, 1, 3]),
}


def _einsum_terms(equation: str) -> tuple[list[int], ...]:
    inputs, _, output = equation.replace(" ", "").partition("->")
    numbers: dict[str, int] = {}
    terms = [*inputs.split(","), output]
    return tuple([numbers.setdefault(c, len(numbers)) for c in term] for term in terms)


def _einsum_type(call: Call) -> list[TensorType]:
    values = call.types("values")
    if len(values) != 2:
        raise call.fail("values", f"takes two tensors, got {len(values)}")
    x, y = values
    if x.rank != y.rank or x.rank not in _EINSUM_FORMS:
        raise call.fail("values", f"needs two tensors of rank 3 or 4, got {x} and {y}")
    if _einsum_terms(call.const("equation")) != _EINSUM_FORMS[x.rank]:
        raise call.fail(
            "equation",
            f"{call.const('equation')!r} is not one of coremltools' two forms: "
            "nchw,nwhu->nchu and chw,whr->chr (any letters)",
        )
    if x.shape[-1] != y.shape[-3]:
        raise call.fail("values", f"contracted sizes differ: {x.shape[-1]} and {y.shape[-3]}")
    shape = [*x.shape[:-1], y.shape[-1]]
    for axis in (-2, -4)[: x.rank - 2]:  # H (and B) broadcast
        shape[axis] = broadcast((x.shape[axis],), (y.shape[axis],), call)[0]
    return [TensorType(x.dtype, tuple(shape))]


def _einsum(a: Args) -> np.ndarray:
    x, y = (np.asarray(v, np.float64) for v in a.many("values"))
    shape = np.broadcast_shapes(x.shape[:-3] + x.shape[-2:-1], y.shape[:-3] + y.shape[-2:-1])
    x = np.broadcast_to(x, (*shape[:-1], x.shape[-3], shape[-1], x.shape[-1]))
    y = np.broadcast_to(y, (*shape[:-1], y.shape[-3], shape[-1], y.shape[-1]))
    return np.einsum(a.const("equation"), x, y)


def _einsum_flops(op: Operation) -> int:
    values = op.inputs["values"]
    assert isinstance(values, tuple)
    return 2 * output_flops(op) * values[0].tensor.shape[-1]


def _sdpa_type(call: Call) -> list[TensorType]:
    q, k, v = call.type("query"), call.type("key"), call.type("value")
    if q.rank < 3 or k.rank != q.rank or v.rank != q.rank:
        raise call.fail("query", "query, key and value need the same rank, at least 3")
    if q.shape[-1] != k.shape[-1]:
        raise call.fail("key", f"embedding {k.shape[-1]} != query embedding {q.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise call.fail("value", f"length {v.shape[-2]} != key length {k.shape[-2]}")
    batch = broadcast(q.shape[:-2], broadcast(k.shape[:-2], v.shape[:-2], call), call)
    if call.has("attn_mask"):
        broadcast(call.type("attn_mask").shape, (*batch, q.shape[-2], k.shape[-2]), call)
    return [TensorType(q.dtype, (*batch, q.shape[-2], v.shape[-1]))]


def _sdpa(a: Args) -> np.ndarray:
    """coremltools' definition: it divides by sqrt(E) itself."""
    q, k, v = a.f64("query"), a.f64("key"), a.f64("value")
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    if a.has("attn_mask"):
        mask = a["attn_mask"]
        scores = scores + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    return np.matmul(softmax(scores, -1), v)


_MATMUL_ARGS = {
    "x": Arg("T"),
    "y": Arg("T"),
    "transpose_x": Arg(BOOL, optional=True, const=True),
    "transpose_y": Arg(BOOL, optional=True, const=True),
}
_SDPA_ARGS = {
    "query": Arg("T"),
    "key": Arg("T"),
    "value": Arg("T"),
    "attn_mask": Arg(FLOATS | BOOL, optional=True),
}

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "matmul",
        F,
        Form(_MATMUL_ARGS, _matmul_type, NUMERIC_T),
        meaning=_matmul,
        traits=PRODUCT,
        graph=GraphUse("x · y, batched (transpose_x, transpose_y)", 4 * U),
        flops=_matmul_flops,
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0003),
    ),
    OpRecord(
        "scaled_dot_product_attention",
        F,
        Form(_SDPA_ARGS, _sdpa_type, FLOAT_T),
        since="ios18",
        meaning=_sdpa,
        graph=GraphUse(
            "softmax(query·keyᵀ/√E)·value (ios18; the ANE ignores attn_mask: see the preflight)",
            10 * U,
        ),
        ane=swept(0.00027),
    ),
    OpRecord(
        "linear",
        F,
        Form(
            {
                "x": Arg("T"),
                "weight": Arg("U", const=True),
                "bias": Arg("U", optional=True, const=True),
            },
            _linear_type,
            {"T": NUMERIC, "U": NUMERIC},
        ),
        meaning=_linear,
        traits=PRODUCT,
        graph=GraphUse("x · weightᵀ + bias, weight [D_out, D_in]; x of rank 1 to 3", 4 * U),
        ane=swept(0.0003),
        flops=_linear_flops,
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "einsum",
        F,
        Form(
            {"values": Arg("T", variadic=True), "equation": Arg(STR, const=True)},
            _einsum_type,
            FLOAT_T,
        ),
        meaning=_einsum,
        traits=PRODUCT,
        graph=GraphUse(
            "a product over the contracted axis: nchw,nwhu->nchu or chw,whr->chr (B and H "
            "broadcast)",
            4 * U,
        ),
        ane=swept(0.0002),
        flops=_einsum_flops,
        histogram={16: Seen(16, src.PUBLISHED)},
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord(
        "lstm", F, histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_DECODER)}
    ),
)
