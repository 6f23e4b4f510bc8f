"""Convolution and its transpose over [N, C, *D] (coremltools `conv.py`). Their cost counts
multiply-adds twice: conv `2 · out · (C_in / groups · kernel)`, conv_transpose
`2 · in · (C_out / groups · kernel)`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_TU, U, operand, swept
from app.mil.ops.record import (
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
from app.mil.ops.windows import WindowError, spatial_args, windows
from app.mil.types import TensorType

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


def _conv_flops(op: Operation) -> int:
    return 2 * output_flops(op) * math.prod(operand(op, "weight").tensor.shape[1:])


def transpose_geometry(call: Call) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, crop before per axis, output sizes) of a conv_transpose."""
    x, w = call.type("x"), call.type("weight")
    n = x.rank - 2
    strides, dilations = spatial_args(x.rank, call.const("strides"), call.const("dilations"))
    kernel = [d * (k - 1) + 1 for k, d in zip(w.shape[2:], dilations, strict=True)]
    full = [(size - 1) * s + k for size, s, k in zip(x.shape[2:], strides, kernel, strict=True)]
    pad_type = call.const("pad_type", "valid")
    if pad_type == "custom":
        pad = list(call.const("pad", [0] * (2 * n)))
        if len(pad) != 2 * n or min(pad, default=0) < 0:
            raise WindowError("pad", f"needs {2 * n} entries >= 0, got {pad}")
        before = pad[::2]
        out = [f - pad[2 * i] - pad[2 * i + 1] for i, f in enumerate(full)]
    elif pad_type == "same":  # as TensorFlow, whose shape rule coremltools follows
        before = [max(0, k - s) // 2 for k, s in zip(kernel, strides, strict=True)]
        out = [size * s for size, s in zip(x.shape[2:], strides, strict=True)]
    elif pad_type == "valid":
        before, out = [0] * n, full
    else:
        raise WindowError("pad_type", f"{pad_type!r} is not valid, same or custom")
    if call.has("output_shape"):
        shape = list(call.const("output_shape"))
        if len(shape) != x.rank or shape[0] != x.shape[0] or shape[1] != w.shape[1] * _groups(call):
            raise WindowError("output_shape", f"{shape} is not [N, C_out, *D] of this op")
        out = shape[2:]
    if min(out) < 1:
        raise WindowError("pad", f"the output would have sizes {out}")
    return strides, dilations, before, out


def _groups(call: Call) -> int:
    return int(call.const("groups", 1))


def _transpose_type(call: Call) -> list[TensorType]:
    x, w = call.type("x"), call.type("weight")
    if x.rank not in (3, 4, 5) or w.rank != x.rank:
        raise call.fail("weight", f"rank {w.rank} weight for a rank {x.rank} input")
    groups = _groups(call)
    if groups < 1 or x.shape[1] % groups or w.shape[0] != x.shape[1]:
        raise call.fail(
            "weight", f"weight [C_in, C_out / groups, *K] with C_in = {x.shape[1]}, got {w}"
        )
    c_out = w.shape[1] * groups
    if call.has("bias") and call.type("bias").shape != (c_out,):
        raise call.fail("bias", f"shape {list(call.type('bias').shape)} != [{c_out}]")
    try:
        *_, out = transpose_geometry(call)
    except WindowError as exc:
        raise call.fail(exc.arg, str(exc)) from None
    return [TensorType(x.dtype, (x.shape[0], c_out, *out))]


def _conv_transpose(a: Args) -> np.ndarray:
    """Each input position scatters its weights, scaled, at position · stride; the result is
    cut to the output window (`before` cropped first), zeros where that reaches past it."""
    x, w = a.f64("x"), a.f64("weight")
    call = Call("conv_transpose", a.op.name, a.op.inputs)
    strides, dilations, before, out = transpose_geometry(call)
    groups = _groups(call)
    n, c_in, *sizes = x.shape
    c_out_g, kernel = w.shape[1], w.shape[2:]
    full = [
        (size - 1) * s + d * (k - 1) + 1
        for size, s, d, k in zip(sizes, strides, dilations, kernel, strict=True)
    ]
    y = np.zeros((n, groups, c_out_g, *full))
    xg = x.reshape(n, groups, c_in // groups, -1)
    wg = w.reshape(groups, c_in // groups, c_out_g, *kernel)
    for k, view in windows(y, kernel, strides, sizes, dilations):
        # the taps of offset k: [g, o, c] @ [n, g, c, positions] -> [n, g, o, positions]
        key: tuple[Any, ...] = (..., *k)
        view += np.matmul(np.swapaxes(wg[key], 1, 2), xg).reshape(view.shape)
    y = y.reshape(n, groups * c_out_g, *full)
    cut = np.zeros((n, groups * c_out_g, *out))
    source: tuple[Any, ...] = (
        ...,
        *(slice(b, min(b + o, f)) for b, o, f in zip(before, out, full, strict=True)),
    )
    target: tuple[Any, ...] = (
        ...,
        *(slice(0, min(o, f - b)) for b, o, f in zip(before, out, full, strict=True)),
    )
    cut[target] = y[source]
    if a.has("bias"):
        cut += a.f64("bias").reshape(-1, *([1] * len(sizes)))
    return cut


def _transpose_flops(op: Operation) -> int:
    x, w = operand(op, "x"), operand(op, "weight")
    return 2 * x.tensor.size * math.prod(w.tensor.shape[1:])


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
# conv's, and the output shape a transposed convolution cannot tell from its input alone
_TRANSPOSE_ARGS = {**_CONV_ARGS, "output_shape": Arg(INT, optional=True, const=True)}

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "conv",
        F,
        Form(_CONV_ARGS, _conv_type, FLOAT_TU),
        meaning=_conv,
        traits=PRODUCT,
        graph=GraphUse("convolution (MIL's own arguments)", 4 * U),
        flops=_conv_flops,
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.00028),
    ),
    OpRecord(
        "conv_transpose",
        F,
        Form(_TRANSPOSE_ARGS, _transpose_type, FLOAT_TU),
        meaning=_conv_transpose,
        traits=PRODUCT,
        graph=GraphUse(
            "transposed convolution, weight [C_in, C_out / groups, *K] (MIL's own arguments; "
            "`same` crops as TensorFlow)",
            4 * U,
        ),
        ane=swept(0.00025),
        flops=_transpose_flops,
    ),
)
