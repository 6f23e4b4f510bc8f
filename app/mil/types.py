"""MIL value types of the IR: tensor types and state types, over the language layer's one dtype
table (`app.language.dtypes`, re-exported here as `DType`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.language.dtypes import DType

FLOATS = frozenset({DType.FP16, DType.FP32})
NUMERIC = frozenset({DType.FP16, DType.FP32, DType.INT32})


@dataclass(frozen=True)
class TensorType:
    """A tensor of fixed shape; shape () is a scalar."""

    dtype: DType
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"tensor<{self.dtype.value}, [{', '.join(map(str, self.shape))}]>"


@dataclass(frozen=True)
class StateType:
    """A mutable buffer (iOS18 `state<tensor<...>>`), only allowed as a function parameter."""

    tensor: TensorType

    def __str__(self) -> str:
        return f"state<{self.tensor}>"


ValueType = TensorType | StateType

__all__ = ["FLOATS", "NUMERIC", "DType", "StateType", "TensorType", "ValueType"]
