"""MIL value types: element dtypes, tensor types and state types.

One table holds every fact about a dtype (its MIL text name, MIL.proto enum, numpy dtype, Core ML
feature type and Blob Storage v2 code), so the text emitter, the proto emitter, the weight writer
and the validators can never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from app.blob import BlobDType

# MIL.proto DataType enum values (see the MIL.proto seed); feature types from FeatureTypes.proto.
# The sub-byte numbers (int4 = 25, uint4..uint3 = 35..39) are newer than the seed's MIL.proto; they
# are the values of coremltools' generated MIL_pb2.DataType.
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
    "int4": 25,
    "uint4": 35,
    "uint2": 36,
    "uint1": 37,
    "uint6": 38,
    "uint3": 39,
}
# Bits per element of the sub-byte dtypes; they are held one per int8/uint8 in memory and packed
# LSB-first where stored (weight.bin entries, protobuf immediate bytes).
_SUBBYTE_BITS = {"int4": 4, "uint1": 1, "uint2": 2, "uint3": 3, "uint4": 4, "uint6": 6}
_FEATURE = {"fp16": 65552, "fp32": 65568, "int32": 131104, "int8": 131080}
# How weight.bin stores a const of each dtype (BlobDataType codes: a numbering of their own).
_BLOB = {
    "fp16": BlobDType.FP16,
    "fp32": BlobDType.FP32,
    "int8": BlobDType.INT8,
    "int16": BlobDType.INT16,
    "int32": BlobDType.INT32,
    "uint8": BlobDType.UINT8,
    "uint16": BlobDType.UINT16,
    "uint32": BlobDType.UINT32,
    "int4": BlobDType.INT4,
    "uint1": BlobDType.UINT1,
    "uint2": BlobDType.UINT2,
    "uint3": BlobDType.UINT3,
    "uint4": BlobDType.UINT4,
    "uint6": BlobDType.UINT6,
}


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
    # Sub-byte dtypes after every byte-sized one, so from_numpy(int8/uint8) still finds INT8/UINT8.
    INT4 = "int4"
    UINT1 = "uint1"
    UINT2 = "uint2"
    UINT3 = "uint3"
    UINT4 = "uint4"
    UINT6 = "uint6"

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
    def blob(self) -> BlobDType:
        """The Blob Storage v2 code weight.bin stores this dtype under."""
        try:
            return _BLOB[self.value]
        except KeyError:
            raise ValueError(f"{self.value} cannot be stored in weight.bin") from None

    @property
    def in_blob(self) -> bool:
        return self.value in _BLOB

    @classmethod
    def from_feature_type(cls, code: int) -> DType | None:
        """The dtype of a Core ML ArrayFeatureType code, None for one no MIL dtype matches."""
        return _BY_FEATURE.get(code)

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self.value]

    @property
    def is_float(self) -> bool:
        return self in (DType.FP16, DType.FP32, DType.FP64)

    @property
    def is_int(self) -> bool:
        return self.value.startswith(("int", "uint"))

    @property
    def is_subbyte(self) -> bool:
        return self.value in _SUBBYTE_BITS

    @property
    def bits(self) -> int:
        """Bits per element as stored: 1..6 for the sub-byte dtypes, else the numpy item size."""
        return _SUBBYTE_BITS.get(self.value) or 8 * self.numpy.itemsize

    @property
    def int_range(self) -> tuple[int, int]:
        """The values an integer dtype can hold (int4: -8..7, uint3: 0..7, ...)."""
        if self is DType.INT4:
            return -8, 7
        if self.is_subbyte:
            return 0, (1 << self.bits) - 1
        info = np.iinfo(self.numpy)
        return int(info.min), int(info.max)

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        dtype = np.dtype(dtype)
        for member in cls:
            if member is not DType.STRING and member.numpy == dtype:
                return member
        raise TypeError(f"numpy dtype {dtype} has no MIL equivalent")


# Built once: np.dtype() on every call showed up in the packaging profile.
_NUMPY_NAMES = {
    "fp16": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "int4": "int8",
    **{name: "uint8" for name in _SUBBYTE_BITS if name.startswith("uint")},
}
_NUMPY = {
    d.value: np.dtype(object) if d is DType.STRING else np.dtype(_NUMPY_NAMES.get(d.value, d.value))
    for d in DType
}

_BY_FEATURE = {code: DType(name) for name, code in _FEATURE.items()}

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
