"""Small questions the passes ask of a value: is it a constant, which one, is it a number, how
does it broadcast against an op's output."""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

from app.mil.ir import ConstValue, Operation, Var
from app.tensors.fp16 import all_finite

# fp16's unit roundoff: a constant written in fp16 is within this relative distance of the number
# meant (0.044715 is stored as 0.04471), so two constants this close are taken as the same.
FP16_CLOSE = 2.0**-10


def const_op(var: Var) -> Operation | None:
    """The plain `const` op that makes `var` (not a constexpr: its compressed form is the point)."""
    op = var.op
    return op if op is not None and op.type == "const" and op.value is not None else None


def stored(var: Var) -> np.ndarray | str | None:
    """A const's value as the program holds it (in its declared dtype)."""
    op = const_op(var)
    return None if op is None or op.value is None else op.value.stored()


def numeric(var: Var) -> bool:
    """Whether `var` is a plain const holding numbers (one `wide` reads), asked without reading
    its values."""
    op = const_op(var)
    return op is not None and op.value is not None and not isinstance(op.value.data, str)


def given(var: Var) -> np.ndarray | None:
    """A numeric const's value as given (a float weight given in fp32 and declared fp16 is its
    fp32 values), in its shape; read-only, never copied."""
    op = const_op(var)
    value = op.value if op is not None else None
    if value is None or isinstance(value.data, str):
        return None
    data, shape = value.data, var.tensor.shape
    if type(data) is not np.ndarray:
        data = np.asarray(data)
    return data if data.shape == shape else data.reshape(shape)


def wide(var: Var) -> np.ndarray | None:
    """A numeric const's value as given, in float64 for floats: a float weight given in fp32 and
    stored in fp16 is folded from its given values, rounded once when the result is stored."""
    data = given(var)
    if data is None or not var.tensor.dtype.is_float:
        return data
    return data.astype(np.float64)  # a copy even when float64: the caller may write into it


def uniform(var: Var) -> np.ndarray | None:
    """The one number a numeric const holds in every element, 0-d (in float64 for floats, as
    `wide` gives it), else None. Asked of its values as given, not widened: a weight is read
    without a float64 copy, and most differ within their first elements. Remembered per const
    value (values are never changed in place): noop_elimination asks it of every operand of
    every binary op, each time it runs."""
    op = const_op(var)
    if op is None or op.value is None or isinstance(op.value.data, str):
        return None
    known = _UNIFORM.get(op.value)
    if known is None:
        known = _UNIFORM[op.value] = (_uniform(op.value),)
    return known[0]


_UNIFORM: weakref.WeakKeyDictionary[ConstValue, tuple[np.ndarray | None]] = (
    weakref.WeakKeyDictionary()
)


def _uniform(value: ConstValue) -> np.ndarray | None:
    is_float = value.type.dtype.is_float
    data = np.asarray(value.data)
    if data.dtype.kind not in "fb" and is_float:  # integers compared widened
        data = data.astype(np.float64)
    if data.size == 0:
        return None
    first = data.flat[0]
    if data.size > 64 and not (data.flat[:64] == first).all():
        return None
    if not (data == first).all():
        return None
    return np.asarray(first, np.float64) if is_float else np.asarray(first)


def scalar(var: Var) -> float | None:
    """The one number a float const holds in every element (a scalar, or a tensor of equal
    elements), else None."""
    value = uniform(var) if var.tensor.dtype.is_float else None
    return None if value is None else float(value)


def close(value: float | None, expected: float, tolerance: float = FP16_CLOSE) -> bool:
    return value is not None and abs(value - expected) <= tolerance * abs(expected)


def operands(op: Operation, var: Var) -> Var | None:
    """For a binary op reading `var` once: its other operand (None when it reads `var` twice or
    not at all)."""
    x, y = op.inputs.get("x"), op.inputs.get("y")
    if x is var and isinstance(y, Var) and y is not var:
        return y
    if y is var and isinstance(x, Var) and x is not var:
        return x
    return None


def per_channel(value: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """The vector along `axis` of a constant broadcast against a tensor of `shape`, when it varies
    along that axis only and broadcasting it leaves `shape` as it is; else None."""
    if value.ndim > len(shape):
        return None
    padded = (1,) * (len(shape) - value.ndim) + value.shape
    for i, (d, full) in enumerate(zip(padded, shape, strict=True)):
        if d != 1 and (i != axis or d != full):
            return None
    flat = value.reshape(-1)
    if flat.size == shape[axis]:
        return flat.astype(np.float64)
    return np.full(shape[axis], flat[0], np.float64)


def value_key(var: Var) -> tuple:
    """What identifies a const's value: dtype, shape and the bytes it holds."""
    value = stored(var)
    t = var.tensor
    if isinstance(value, str):
        return ("const", t.dtype, value)
    return ("const", t.dtype, t.shape, _digest(np.asarray(value)))


def value_hint(var: Var) -> tuple:
    """A cheap part of `value_key`: dtype, shape and a few of the bytes at each end. Consts with
    different hints hold different values; with equal ones, `same_value` tells. Remembered per
    const value, as `uniform`."""
    op = const_op(var)
    assert op is not None and op.value is not None
    known = _HINTS.get(op.value)
    if known is None:
        known = _HINTS[op.value] = _hint(op.value)
    return known


_HINTS: weakref.WeakKeyDictionary[ConstValue, tuple] = weakref.WeakKeyDictionary()


def _hint(value: ConstValue) -> tuple:
    t = value.type
    if isinstance(value.data, str):
        return ("const", t.dtype, value.data)
    # the ends of the data as given, each stored: a weight given wider is not converted whole,
    # nor one held as a view (a transposed weight) copied whole to reach them
    given = np.asarray(value.data)
    n = given.size
    ends = np.concatenate([given.flat[:4], given.flat[max(0, n - 4) :]]).astype(t.dtype.numpy)
    return ("const", t.dtype, t.shape, ends.tobytes())


def same_value(a: Var, b: Var) -> bool:
    """Whether two consts hold the same dtype, shape and bytes (compared, not hashed)."""
    if a is b:
        return True
    x, y = stored(a), stored(b)
    if a.tensor.dtype != b.tensor.dtype or a.tensor.shape != b.tensor.shape:
        return False
    if isinstance(x, str) or isinstance(y, str):
        return x == y
    xs, ys = np.asarray(x), np.asarray(y)
    if xs.shape != ys.shape or xs.dtype.itemsize != ys.dtype.itemsize:
        return False
    if xs.ndim == 0 or xs.size == 0:
        return xs.tobytes() == ys.tobytes()
    # the bits compared as unsigned integers (bytes, not values: -0 is not 0, NaN is NaN), a
    # block of the leading axis at a time (about a MiB), each side read as it is laid out: a
    # transposed weight is not copied whole, and most pairs differ in their first block
    bits = np.dtype(f"u{xs.dtype.itemsize}")
    xs, ys = xs.view(bits), ys.view(bits)
    step = max(1, (1 << 20) // max(1, xs[0].nbytes))
    return all(
        np.array_equal(xs[i : i + step], ys[i : i + step]) for i in range(0, xs.shape[0], step)
    )


# Digests of the arrays hashed lately, by the array that holds their memory (a const's stored
# value is a new view of it at each call), each with a weak reference that says whether that id
# is still that array's: the dedup passes key every const each time they run, and a model's
# weights are hundreds of megabytes (no pass writes a const's array in place).
_DIGESTS: dict[tuple, tuple[weakref.ref, bytes]] = {}


def _digest(array: np.ndarray) -> bytes:
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    key = (
        id(root),
        array.__array_interface__["data"][0],
        array.shape,
        array.strides,
        array.dtype.str,
    )
    known = _DIGESTS.get(key)
    if known is not None and known[0]() is root:
        return known[1]
    digest = _sha256(array)
    if array.nbytes >= 1 << 16:
        if len(_DIGESTS) > 4096:
            _DIGESTS.clear()
        _DIGESTS[key] = (weakref.ref(root), digest)
    return digest


def _sha256(array: np.ndarray) -> bytes:
    """SHA-256 of the array's bytes in C order: hashed in place when it is laid out so, else
    (a transposed weight, a view) a block of its leading axis at a time, never copied whole."""
    if array.flags.c_contiguous or array.ndim == 0:
        data = np.ascontiguousarray(array)
        return hashlib.sha256(data.reshape(-1).view(np.uint8).data).digest()
    h = hashlib.sha256()
    step = max(1, (1 << 20) // max(1, array[0].nbytes))  # about 1 MiB a block
    for start in range(0, array.shape[0], step):
        block = np.ascontiguousarray(array[start : start + step])
        h.update(block.reshape(-1).view(np.uint8).data)
    return h.digest()


_LARGEST = {np.dtype(t).str: float(np.finfo(t).max) for t in (np.float16, np.float32, np.float64)}


def fits(value: np.ndarray | None, var: Var) -> bool:
    """Whether `value`, stored in `var`'s dtype, stays finite (a folded weight must not overflow
    fp16 where the unfolded ops would not have)."""
    if value is None:
        return True
    dtype = var.tensor.dtype
    if not dtype.is_float:
        return True
    array = value if type(value) is np.ndarray else np.asarray(value)
    # within the dtype's largest finite number: finite when stored, whatever the rounding (nan
    # and inf compare false and are looked at below)
    if (
        array.dtype == np.float64
        and array.size
        and float(np.abs(array).max()) <= _LARGEST[dtype.numpy.str]
    ):
        return True
    # a value in that dtype already (a weight as the program holds it) is read as it is
    array = array.astype(dtype.numpy, copy=False)
    if array.dtype == np.float16:  # read off the bits: numpy's fp16 isfinite goes via float32
        return all_finite(array)
    return bool(np.isfinite(array).all())
