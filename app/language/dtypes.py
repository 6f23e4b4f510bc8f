"""MIL element types: the one table of every fact about a dtype.

A row per dtype: its `model.mil` spelling, its MIL.proto `DataType` number, how NumPy holds its
values, bits per element as stored, its Blob Storage v2 code in weight.bin (`BlobDataType`, a
numbering of its own), its Core ML feature type where it can be a model input or output, and the
`TensorValue` field an immediate value keeps its elements in. The text printer and parser, the
protobuf emitter and loader, the weight writer and reader and the validators all read it here.

Sources: MIL.proto `DataType` (the sub-byte numbers int4 = 25, uint4..uint3 = 35..39 and the
bf16/fp8 ones are those of coremltools' generated `MIL_pb2`); `BlobDataType.hpp` (coremltools'
MILBlob) for the blob codes; `FeatureTypes.proto` `ArrayDataType` for the feature types. Text
names Apple's goldens print are proven (fp16, fp32, int8, int32, uint8, uint32, uint64, bool,
string); the rest follow coremltools' `types/type_mapping.py`; bf16, fp8e4m3fn and fp8e5m2 appear
in no golden and no coremltools release: their spelling is the enum name shortened the same way,
an unverified choice. Storage fields follow coremltools' `backend/mil/helper.py`, which Apple's
parser reads: fp16, int8, uint8, uint32 and the sub-byte types as raw little-endian bytes
(sub-byte ones packed LSB first), int16/uint16/int32 in `ints`, 64-bit integers in `longInts`;
bf16 and fp8 go to `bytes` too (unverified: the only field that holds them exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


@dataclass(frozen=True)
class _Row:
    proto: int  # MIL.proto DataType
    numpy: str  # how NumPy holds a value (sub-byte: one per int8/uint8; bf16/fp8: raw bits)
    bits: int  # per element as stored
    kind: str  # "float", "raw-float" (no NumPy type: bit patterns), "int", "uint", "bool", "string"
    field: str  # the TensorValue field an immediate value's elements go to
    blob: int | None = None  # Blob Storage v2 BlobDataType, for the dtypes weight.bin stores
    feature: int | None = None  # Core ML ArrayFeatureType, for the dtypes a model's I/O may have


_ROWS: dict[str, _Row] = {
    "bool": _Row(1, "bool", 8, "bool", "bools"),
    "string": _Row(2, "object", 0, "string", "strings"),
    "fp16": _Row(10, "float16", 16, "float", "bytes", blob=1, feature=65552),
    "fp32": _Row(11, "float32", 32, "float", "floats", blob=2, feature=65568),
    "fp64": _Row(12, "float64", 64, "float", "doubles"),
    "int8": _Row(21, "int8", 8, "int", "bytes", blob=4, feature=131080),
    "int16": _Row(22, "int16", 16, "int", "ints", blob=6),
    "int32": _Row(23, "int32", 32, "int", "ints", blob=14, feature=131104),
    "int64": _Row(24, "int64", 64, "int", "longInts"),
    "uint8": _Row(31, "uint8", 8, "uint", "bytes", blob=3),
    "uint16": _Row(32, "uint16", 16, "uint", "ints", blob=7),
    "uint32": _Row(33, "uint32", 32, "uint", "bytes", blob=15),
    "uint64": _Row(34, "uint64", 64, "uint", "longInts"),
    "int4": _Row(25, "int8", 4, "int", "bytes", blob=8),
    "uint1": _Row(37, "uint8", 1, "uint", "bytes", blob=9),
    "uint2": _Row(36, "uint8", 2, "uint", "bytes", blob=10),
    "uint3": _Row(39, "uint8", 3, "uint", "bytes", blob=12),
    "uint4": _Row(35, "uint8", 4, "uint", "bytes", blob=11),
    "uint6": _Row(38, "uint8", 6, "uint", "bytes", blob=13),
    "bf16": _Row(13, "uint16", 16, "raw-float", "bytes", blob=5),
    "fp8e4m3fn": _Row(40, "uint8", 8, "raw-float", "bytes", blob=16),
    "fp8e5m2": _Row(41, "uint8", 8, "raw-float", "bytes", blob=17),
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
    # After every byte-sized type, so from_numpy(int8/uint8/uint16) finds INT8/UINT8/UINT16.
    INT4 = "int4"
    UINT1 = "uint1"
    UINT2 = "uint2"
    UINT3 = "uint3"
    UINT4 = "uint4"
    UINT6 = "uint6"
    BF16 = "bf16"
    FP8E4M3FN = "fp8e4m3fn"
    FP8E5M2 = "fp8e5m2"

    # Set on each member below the class (annotated only, so not members themselves).
    _row: _Row
    _numpy: np.dtype

    @property
    def proto(self) -> int:
        return self._row.proto

    @property
    def numpy(self) -> np.dtype:
        return self._numpy

    @property
    def bits(self) -> int:
        """Bits per element as stored: 1..6 for the sub-byte dtypes."""
        return self._row.bits

    @property
    def field(self) -> str:
        """The TensorValue field an immediate value's elements are stored in."""
        return self._row.field

    @property
    def blob_code(self) -> int:
        """The Blob Storage v2 code weight.bin stores this dtype under."""
        code = self._row.blob
        if code is None:
            raise ValueError(f"{self.value} cannot be stored in weight.bin")
        return code

    @property
    def in_blob(self) -> bool:
        return self._row.blob is not None

    @property
    def can_be_io(self) -> bool:
        """Whether a Core ML model's input or output may be of this dtype (it has a feature type:
        fp16, fp32, int8, int32)."""
        return self._row.feature is not None

    @property
    def feature_type(self) -> int:
        """Core ML ArrayFeatureType for model inputs/outputs; only a few dtypes can be I/O."""
        code = self._row.feature
        if code is None:
            raise ValueError(f"{self.value} cannot be a model input or output")
        return code

    @property
    def is_float(self) -> bool:
        """A float NumPy computes with (fp16, fp32, fp64)."""
        return self._row.kind == "float"

    @property
    def is_raw_float(self) -> bool:
        """A float NumPy has no type for (bf16, fp8): held as bit patterns."""
        return self._row.kind == "raw-float"

    @property
    def is_int(self) -> bool:
        return self._row.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self._row.kind == "int"

    @property
    def is_subbyte(self) -> bool:
        return self.bits in (1, 2, 3, 4, 6)

    @property
    def int_range(self) -> tuple[int, int]:
        """The values an integer dtype can hold (int4: -8..7, uint3: 0..7, ...)."""
        if not self.is_int:
            raise ValueError(f"{self.value} is not an integer type")
        if self.is_signed:
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1

    @classmethod
    def from_proto(cls, code: int) -> DType | None:
        """The dtype of a MIL.proto DataType number, None for one the table lacks."""
        return _BY_PROTO.get(code)

    @classmethod
    def from_feature_type(cls, code: int) -> DType | None:
        """The dtype of a Core ML ArrayFeatureType code, None for one no MIL dtype matches."""
        return _BY_FEATURE.get(code)

    @classmethod
    def from_blob_code(cls, code: int) -> DType | None:
        return _BY_BLOB.get(code)

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        """The dtype NumPy's `dtype` is the natural holder of (never a sub-byte or raw-bits one)."""
        found = _BY_NUMPY.get(np.dtype(dtype))
        if found is None:
            raise TypeError(f"numpy dtype {np.dtype(dtype)} has no MIL equivalent")
        return found


# Each member keeps its row and NumPy dtype as attributes: np.dtype() per call, and even a dict
# lookup keyed by the member (Enum hashing runs in Python), showed up in the packaging profile.
for _d in DType:
    _d._row = _ROWS[_d.value]
    _d._numpy = np.dtype(_ROWS[_d.value].numpy)
_BY_PROTO = {_ROWS[d.value].proto: d for d in DType}
_BY_FEATURE = {row.feature: DType(name) for name, row in _ROWS.items() if row.feature is not None}
_BY_BLOB = {row.blob: DType(name) for name, row in _ROWS.items() if row.blob is not None}
_BY_NUMPY: dict[np.dtype, DType] = {}
for _d in DType:
    if _d is not DType.STRING and not _d.is_subbyte and not _d.is_raw_float:
        _BY_NUMPY.setdefault(_d.numpy, _d)
assert set(_ROWS) == {d.value for d in DType}
