"""Matrix products and convolution, and attention built on them (coremltools `conv.py`,
`linear.py`, iOS18 `transformers.py`). Their cost counts multiply-adds twice: conv
`2 · out · (C_in / groups · kernel)`, matmul and linear `2 · out · K`."""

from __future__ import annotations

import math

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation, Var
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_T, NUMERIC_T, U, broadcast, softmax
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
    Trait,
    output_flops,
)
from app.mil.types import FLOATS, TensorType

F = Family.LINEAR
PRODUCT = frozenset({Trait.COMPOUNDING})


def _conv_type(call: Call) -> list[TensorType]:
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


def _conv(a: Args) -> np.ndarray:
    x, w = a.f64("x"), a.f64("weight")
    n = x.ndim - 2
    strides = a.const("strides", [1] * n)
    dil = a.const("dilations", [1] * n)
    groups = a.const("groups", 1)
    kernel = w.shape[2:]
    pad_type = a.const("pad_type", "valid")
    if pad_type == "custom":
        pad = a.const("pad", [0] * (2 * n))
        pads = [(pad[2 * i], pad[2 * i + 1]) for i in range(n)]
    elif pad_type == "same":  # coremltools: total padding split with the extra element after
        pads = []
        for i, size in enumerate(x.shape[2:]):
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - size, 0)
            pads.append((total // 2, total - total // 2))
    else:
        pads = [(0, 0)] * n
    x = np.pad(x, [(0, 0), (0, 0), *pads])
    out_shape = [
        (x.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(n)
    ]
    cin, cout = w.shape[1], w.shape[0]
    xg = x.reshape(x.shape[0], groups, cin, *x.shape[2:])
    wg = w.reshape(groups, cout // groups, cin, *kernel)
    y = np.zeros((x.shape[0], groups, cout // groups, *out_shape))
    for k in np.ndindex(*kernel):
        window = tuple(
            slice(k[i] * dil[i], k[i] * dil[i] + (out_shape[i] - 1) * strides[i] + 1, strides[i])
            for i in range(n)
        )
        patch = xg[(slice(None), slice(None), slice(None), *window)]
        # [g, o, c] @ [n, g, c, positions]: a BLAS product (einsum would loop in NumPy)
        flat = patch.reshape(*patch.shape[:3], -1)
        y += np.matmul(wg[(..., *k)], flat).reshape(y.shape)
    y = y.reshape(x.shape[0], cout, *out_shape)
    if a.has("bias"):
        y += a.f64("bias").reshape(cout, *([1] * n))
    return y


def _weight(op: Operation) -> Var:
    weight = op.inputs["weight"]
    assert isinstance(weight, Var)
    return weight


def _conv_flops(op: Operation) -> int:
    return 2 * output_flops(op) * math.prod(_weight(op).tensor.shape[1:])


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
    return 2 * output_flops(op) * _weight(op).tensor.shape[-1]


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


_CONV_ARGS = {
    "x": Arg("T"),
    "weight": Arg("U"),
    "bias": Arg("U", optional=True),
    "strides": Arg(INT, optional=True, const=True),
    "pad_type": Arg(STR, optional=True, const=True),
    "pad": Arg(INT, optional=True, const=True),
    "dilations": Arg(INT, optional=True, const=True),
    "groups": Arg(INT, optional=True, const=True),
}
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
        "conv",
        F,
        Form(_CONV_ARGS, _conv_type, {"T": FLOATS, "U": FLOATS}),
        meaning=_conv,
        traits=PRODUCT,
        graph=GraphUse("convolution (MIL's own arguments)", 4 * U),
        flops=_conv_flops,
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "matmul",
        F,
        Form(_MATMUL_ARGS, _matmul_type, NUMERIC_T),
        meaning=_matmul,
        traits=PRODUCT,
        graph=GraphUse("x · y, batched (transpose_x, transpose_y)", 4 * U),
        flops=_matmul_flops,
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
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
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord("linear", F, flops=_linear_flops, histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    OpRecord("einsum", F, histogram={16: Seen(16, src.PUBLISHED)}),
    OpRecord(
        "lstm", F, histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_DECODER)}
    ),
)
