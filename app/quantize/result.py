"""What a quantizer returns: the constexpr op(s) that rebuild a weight, and the weight they give."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app.mil.types import DType
from app.tensors.fp16 import all_finite


@dataclass(frozen=True)
class Param:
    """One const argument of a constexpr op: its values (one per element, also for sub-byte
    dtypes) and the MIL dtype it is stored as."""

    array: np.ndarray
    dtype: DType

    @property
    def nbytes(self) -> int:
        """Bytes it takes stored (sub-byte values packed)."""
        return -(-self.array.size * self.dtype.bits // 8)


@dataclass(frozen=True)
class ConstexprOp:
    """One op of the chain. `chained` binds arguments to outputs of the op before it (by output
    index), for the pruned-then-quantized pair."""

    op_type: str
    params: dict[str, Param]
    chained: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Compressed:
    """A compressed weight: ops[-1] produces the weight (`shape`, `dtype`), which `decompressed`
    computes from the stored arguments each time it is asked for. It is not held: a program's
    weights decompressed take as much memory as its fp16 weights, and only verifying needs them."""

    ops: tuple[ConstexprOp, ...]
    shape: tuple[int, ...]
    dtype: DType
    rebuild: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @property
    def decompressed(self) -> np.ndarray:
        """The weight the ops give, computed now."""
        return self.rebuild()

    @property
    def nbytes(self) -> int:
        """Bytes of every stored argument, against `math.prod(shape)` values uncompressed."""
        return sum(p.nbytes for op in self.ops for p in op.params.values())


def as_weight(weight: np.ndarray, dtype: DType, field: str) -> np.ndarray:
    """The weight in the dtype it is compressed in (as coremltools compresses fp16 consts), checked
    finite there: an inf or NaN has no place in a LUT or a scale."""
    from app.quantize.config import QuantizeConfigError

    array = np.asarray(weight)
    if array.dtype.kind != "f":
        raise QuantizeConfigError(field, f"must hold floats to be quantized, not {array.dtype}")
    with np.errstate(over="ignore"):
        converted = array.astype(dtype.numpy)
    if converted.dtype == np.float16:  # on the bits: NumPy's fp16 isfinite is element by element
        finite = all_finite(converted)
    else:
        finite = bool(np.isfinite(converted).all())
    if not finite:
        raise QuantizeConfigError(field, f"has values that are not finite in {dtype.value}")
    return converted
