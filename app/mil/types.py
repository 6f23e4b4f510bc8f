"""MIL value types: element dtypes, tensor types and state types.

One table holds every fact about a dtype (its MIL text name, MIL.proto enum, numpy dtype and Core ML
feature type), so the text emitter, the proto emitter and the weight writer can never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

# MIL.proto DataType enum values (see the MIL.proto seed); feature types from FeatureTypes.proto.
_PROTO = {
    "bool": 1,
    "string": 2,
    "fp16": 10,
    "fp32": 11,
    "fp64": 12,
    "int8": 21,
    "int16": 22,
    "int32": 23,
    "int64": 24,
    "uint8": 31,
    "uint16": 32,
    "uint32": 33,
    "uint64": 34,
}
_FEATURE = {"fp16": 65552, "fp32": 65568, "int32": 131104, "int8": 131080}


class DType(Enum):
    """An element type, valued by its MIL text spelling."""

    BOOL = "bool"
    STRING = "string"
    FP16 = "fp16"
    FP32 = "fp32"
    FP64 = "fp64"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"

    @property
    def proto(self) -> int:
        return _PROTO[self.value]

    @property
    def feature_type(self) -> int:
        """Core ML ArrayFeatureType for model inputs/outputs; only a few dtypes can be I/O."""
        try:
            return _FEATURE[self.value]
        except KeyError:
            raise ValueError(f"{self.value} cannot be a model input or output") from None

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self.value]

    @property
    def is_float(self) -> bool:
        return self in (DType.FP16, DType.FP32, DType.FP64)

    @property
    def is_int(self) -> bool:
        return self.value.startswith(("int", "uint"))

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        dtype = np.dtype(dtype)
        for member in cls:
            if member is not DType.STRING and member.numpy == dtype:
                return member
        raise TypeError(f"numpy dtype {dtype} has no MIL equivalent")


# Built once: np.dtype() on every call showed up in the packaging profile.
_NUMPY = {
    d.value: np.dtype(object)
    if d is DType.STRING
    else np.dtype({"fp16": "float16", "fp32": "float32", "fp64": "float64"}.get(d.value, d.value))
    for d in DType
}

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
