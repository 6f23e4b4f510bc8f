"""Normalizations (coremltools `normalization.py`, iOS17 forms: the parameters' float dtype may
differ from x's). Each divides by √(variance + epsilon), the population variance (1/n);
batch_norm takes the mean and variance as constants (inference), layer_norm and instance_norm
compute them from x."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_TU, U, swept
from app.mil.ops.record import (
    INT,
    AneFacts,
    AneStatus,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
    output_flops,
)
from app.mil.types import TensorType

F = Family.NORMALIZATION
_PARAM = Arg("U", optional=True, const=True)
_EPSILON = 1e-5  # coremltools' default for all three


def _channel_vectors(call: Call, args: tuple[str, ...], ranks: tuple[int, ...]) -> None:
    x = call.type("x")
    if x.rank not in ranks:
        raise call.fail("x", f"needs [N, C, *D] of rank {', '.join(map(str, ranks))}, got {x}")
    for arg in args:
        if call.has(arg) and call.type(arg).shape != (x.shape[1],):
            raise call.fail(
                arg, f"needs one value per channel: [{x.shape[1]}], got {call.type(arg)}"
            )


def _batch_norm_type(call: Call) -> list[TensorType]:
    _channel_vectors(call, ("mean", "variance", "gamma", "beta"), (3, 4, 5))
    return [call.type("x")]


def _instance_norm_type(call: Call) -> list[TensorType]:
    _channel_vectors(call, ("gamma", "beta"), (3, 4))
    return [call.type("x")]


def _layer_norm_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, list(range(x.rank)))
    normalized = tuple(d for i, d in enumerate(x.shape) if i in axes)
    for arg in ("gamma", "beta"):
        if call.has(arg) and call.type(arg).shape != normalized:
            raise call.fail(
                arg, f"needs the normalized shape {list(normalized)}, got {call.type(arg)}"
            )
    return [x]


def _per_channel(a: Args, arg: str, x: np.ndarray, default: float) -> np.ndarray | float:
    if not a.has(arg):
        return default
    return a.f64(arg).reshape(-1, *[1] * (x.ndim - 2))


def _normalize(a: Args, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    centred = x - np.mean(x, axis=axes, keepdims=True)
    variance = np.mean(np.square(centred), axis=axes, keepdims=True)
    return centred / np.sqrt(variance + a.const("epsilon", _EPSILON))


def _layer_norm(a: Args) -> np.ndarray:
    x = a.f64("x")
    axes = a.const("axes", list(range(x.ndim)))
    axes = tuple(sorted(int(ax) % x.ndim for ax in ([axes] if isinstance(axes, int) else axes)))
    shape = [d if i in axes else 1 for i, d in enumerate(x.shape)]
    y = _normalize(a, x, axes)
    if a.has("gamma"):
        y = y * a.f64("gamma").reshape(shape)
    return y + a.f64("beta").reshape(shape) if a.has("beta") else y


def _instance_norm(a: Args) -> np.ndarray:
    x = a.f64("x")
    y = _normalize(a, x, tuple(range(2, x.ndim)))
    return y * _per_channel(a, "gamma", x, 1.0) + _per_channel(a, "beta", x, 0.0)


def _batch_norm(a: Args) -> np.ndarray:
    x = a.f64("x")
    mean, variance = _per_channel(a, "mean", x, 0.0), _per_channel(a, "variance", x, 1.0)
    y = (x - mean) / np.sqrt(variance + a.const("epsilon", _EPSILON))
    return y * _per_channel(a, "gamma", x, 1.0) + _per_channel(a, "beta", x, 0.0)


def _computed_flops(op: Operation) -> int:
    """mean, centre, square, mean of the squares, scale: five operations per element."""
    return 5 * output_flops(op)


def _constant_flops(op: Operation) -> int:
    """A scale and a shift per element (the constants folded)."""
    return 2 * output_flops(op)


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "layer_norm",
        F,
        Form(
            {
                "x": Arg("T"),
                "axes": Arg(INT, optional=True, const=True),
                "gamma": _PARAM,
                "beta": _PARAM,
                "epsilon": _PARAM,
            },
            _layer_norm_type,
            FLOAT_TU,
        ),
        meaning=_layer_norm,
        flops=_computed_flops,
        graph=GraphUse(
            "(x - mean) / √(variance + epsilon) · gamma + beta over `axes` (all unless given; "
            "gamma and beta of the normalized shape; epsilon 1e-5)",
            8 * U,
        ),
        ane=AneFacts(
            AneStatus.REPORTED_FAILING,
            "ANEForge reports layer_norm failures that depend on the chip and on the affine "
            "values (its sweep compiles and runs one shape correctly); if the compile fails, "
            "spell it with reduce_mean, sub, mul and rsqrt",
            f"{src.FUSED_24}; sbryngelson/ANEForge issue #149; {src.ANEFORGE_SWEEP}",
        ),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "instance_norm",
        F,
        Form(
            {"x": Arg("T"), "gamma": _PARAM, "beta": _PARAM, "epsilon": _PARAM},
            _instance_norm_type,
            FLOAT_TU,
        ),
        meaning=_instance_norm,
        flops=_computed_flops,
        graph=GraphUse(
            "layer_norm over the spatial axes of [N, C, *D] (rank 3 or 4), gamma and beta [C]",
            8 * U,
        ),
        ane=swept(0.00076),
        histogram={17: Seen(17, src.PUBLISHED)},
    ),
    OpRecord(
        "batch_norm",
        F,
        Form(
            {
                "x": Arg("T"),
                "mean": Arg("U", const=True),
                "variance": Arg("U", const=True),
                "gamma": _PARAM,
                "beta": _PARAM,
                "epsilon": _PARAM,
            },
            _batch_norm_type,
            FLOAT_TU,
        ),
        meaning=_batch_norm,
        flops=_constant_flops,
        graph=GraphUse(
            "(x - mean) / √(variance + epsilon) · gamma + beta per channel of [N, C, *D] "
            "(rank 3 to 5; mean, variance, gamma, beta [C])",
            4 * U,
        ),
        ane=swept(0.00037),
    ),
)
