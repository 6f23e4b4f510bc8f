"""Nodes evaluated at import, in numpy: the ops shape arithmetic and constant subgraphs are made
of, written here (a few lines each, and several times faster than building a reference session
per node); any other op through onnx's reference implementation (onnx.reference).
GatherElements is here also because onnx 1.23's reference implementation of it fails on numpy 2
(it rebuilds its result with np.array over a list of 0-d arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import NodeProto, helper

from app.errors import ErrorKind, FieldError, RequestError

Arrays = list[np.ndarray | None]
Fold = Callable[[Arrays, dict[str, Any]], list[np.ndarray]]


def _axes(arrays: Arrays, attrs: dict[str, Any], rank: int) -> list[int]:
    given = arrays[1] if len(arrays) > 1 and arrays[1] is not None else attrs.get("axes", [])
    return sorted(int(a) % rank for a in np.asarray(given).reshape(-1))


def _unsqueeze(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x = a[0]
    assert x is not None
    rank = x.ndim + len(
        np.asarray(a[1] if len(a) > 1 and a[1] is not None else attrs["axes"]).reshape(-1)
    )
    out = x
    for axis in _axes(a, attrs, rank):
        out = np.expand_dims(out, axis)
    return [out]


def _squeeze(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x = a[0]
    assert x is not None
    has = (len(a) > 1 and a[1] is not None) or "axes" in attrs
    return [np.squeeze(x, axis=tuple(_axes(a, attrs, x.ndim))) if has else np.squeeze(x)]


def _reshape(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x, shape = a[0], a[1]
    assert x is not None and shape is not None
    dims = [int(d) for d in shape]
    if not attrs.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return [x.reshape(dims)]


def _slice(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x, starts, ends = a[0], a[1], a[2]
    assert x is not None and starts is not None and ends is not None
    axes = a[3] if len(a) > 3 and a[3] is not None else range(len(starts))
    steps = a[4] if len(a) > 4 and a[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[int(axis) % x.ndim] = slice(
            *slice(int(s), int(e), int(step)).indices(x.shape[int(axis) % x.ndim])
        )
    return [x[tuple(index)]]


def _cast(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    assert a[0] is not None
    return [a[0].astype(helper.tensor_dtype_to_np_dtype(attrs["to"]))]


def _range(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    start, limit, delta = (np.asarray(v).reshape(()) for v in a)
    # numpy's stubs take no 0-d arrays here; arange reads them as scalars of their own dtype
    return [np.arange(start, limit, delta).astype(np.asarray(a[0]).dtype)]  # type: ignore[call-overload]


def _given(value: np.ndarray | None) -> np.ndarray:
    """A required input (the model's checker has seen that it is there)."""
    assert value is not None
    return value


def _constant_of_shape(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    value = attrs.get("value")
    fill = np.zeros(1, np.float32) if value is None else _tensor(value)
    assert a[0] is not None
    return [np.full([int(d) for d in a[0]], fill.reshape(-1)[0], fill.dtype)]


def _tensor(proto) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(proto)


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Fold:
    def fold(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
        x, y = a[0], a[1]
        assert x is not None and y is not None
        return [np.asarray(f(x, y))]

    return fold


def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        return (np.trunc(x / y)).astype(x.dtype)  # ONNX integer division truncates
    return (x / y).astype(x.dtype)


def _gather(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x, i = a[0], a[1]
    assert x is not None and i is not None
    return [np.take(x, i, axis=int(attrs.get("axis", 0)))]


def _gather_elements(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x, i = a[0], a[1]
    assert x is not None and i is not None
    axis = int(attrs.get("axis", 0))
    i = np.where(i < 0, i + x.shape[axis], i)
    return [np.take_along_axis(x, i, axis=axis)]


def _concat(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    return [np.concatenate([v for v in a if v is not None], axis=int(attrs["axis"]))]


def _where(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    c, x, y = a
    assert c is not None and x is not None and y is not None
    return [np.where(c, x, y).astype(np.result_type(x, y))]


def _shape(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    assert a[0] is not None
    return [np.array(a[0].shape, np.int64)[attrs.get("start", 0) : attrs.get("end")]]


def _transpose(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    assert a[0] is not None
    return [np.transpose(a[0], attrs.get("perm"))]


def _expand(a: Arrays, attrs: dict[str, Any]) -> list[np.ndarray]:
    x, shape = a
    assert x is not None and shape is not None
    return [x * np.ones([int(d) for d in shape], x.dtype)]


FOLDS: dict[str, Fold] = {
    "Identity": lambda a, _: [_given(a[0])],
    "Cast": _cast,
    "Shape": _shape,
    "Size": lambda a, _: [np.array(np.asarray(a[0]).size, np.int64)],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Slice": _slice,
    "Concat": _concat,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "Transpose": _transpose,
    "Expand": _expand,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Where": _where,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Equal": _binary(np.equal),
    "Less": _binary(np.less),
    "Greater": _binary(np.greater),
    "And": _binary(np.logical_and),
    "Or": _binary(np.logical_or),
    "Not": lambda a, _: [np.logical_not(_given(a[0]))],
}


def evaluate(
    proto: NodeProto,
    inputs: list[np.ndarray | None],
    attrs: dict[str, Any],
    opset: int,
    where: tuple[str, str],
) -> list[np.ndarray]:
    """A node whose inputs are all known, computed now (floats in float32); `where` (its field
    and label) names it in a refusal."""
    field, label = where
    what = f"{proto.op_type} node {label!r}"
    _check_claimed_size(proto, inputs, field, what)
    feeds = {}
    for name, value in zip(proto.input, inputs, strict=True):
        if name and value is not None:
            feeds[name] = value.astype(np.float32) if value.dtype == np.float16 else value
    fold = FOLDS.get(proto.op_type)
    try:
        if fold is not None:
            with np.errstate(all="ignore"):
                results = fold([feeds.get(name) if name else None for name in proto.input], attrs)
        else:
            # imported here: onnx.reference costs about 10 MiB, and the ops above fold most models
            from onnx.reference import ReferenceEvaluator

            computed = ReferenceEvaluator(proto, opsets={"": opset}).run(None, feeds)
            assert isinstance(computed, list)  # every output in order, none being named
            results = computed
    except FieldError:
        raise
    except Exception as exc:  # the implementation's own refusal of bad inputs
        raise RequestError(field, f"{what} cannot be evaluated: {exc}") from None
    out = []
    for value in results:
        array = np.asarray(value)
        if array.size > MAX_FOLDED_ELEMENTS:
            raise RequestError(field, f"{what} makes a constant of {array.size} elements")
        out.append(array)
    return out


MAX_FOLDED_ELEMENTS = 1 << 28


def _check_claimed_size(
    proto: NodeProto, inputs: list[np.ndarray | None], field: str, what: str
) -> None:
    """Ops that make a tensor of a size their inputs say, refused before it is made."""
    shape = None
    if proto.op_type == "ConstantOfShape":
        shape = inputs[0]
    elif proto.op_type == "Expand" and len(inputs) > 1:
        shape = inputs[1]
    if shape is None:
        return
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    count = 1
    for d in dims:
        count *= max(d, 1)
    if count > MAX_FOLDED_ELEMENTS:
        raise RequestError(
            field,
            f"{what} makes a constant of shape {dims}, over {MAX_FOLDED_ELEMENTS} elements",
            kind=ErrorKind.TOO_LARGE,
            title="Tensor too large",
        )
