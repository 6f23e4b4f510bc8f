"""The project's MIL dtypes as Core AI dtypes: one table."""

from __future__ import annotations

import numpy as np

from app.mil import DType

# MIL dtype -> the Core AI authoring dtype's name; NumPy holds its values as the MIL dtype table
# says (app.language.dtypes: int4 in int8, uint4 and uint2 in uint8).
_TABLE = {
    DType.FP16: "float16",
    DType.FP32: "float32",
    DType.INT32: "int32",
    DType.BOOL: "bool_",
    DType.INT8: "int8",
    DType.UINT8: "uint8",
    DType.INT16: "int16",
    DType.UINT16: "uint16",
    DType.INT4: "int4",
    DType.UINT4: "uint4",
    DType.UINT2: "uint2",
}
_BY_NAME = {name: dtype for dtype, name in _TABLE.items()}


# Index arguments (permutations, tile repetitions) that MIL writes as int32.
_INDEX_ONLY = {"uint32": np.uint32}


def has_dtype(dtype: DType) -> bool:
    return dtype in _TABLE


def dtype_name(dtype: DType) -> str:
    """The Core AI dtype name of a MIL dtype (KeyError: it has none)."""
    return _TABLE[dtype]


def numpy_dtype(name: str) -> np.dtype:
    dtype = _BY_NAME.get(name)
    return dtype.numpy if dtype is not None else np.dtype(_INDEX_ONLY[name])


def mil_dtype(name: str) -> DType:
    """The MIL dtype of a Core AI dtype name (KeyError: none)."""
    return _BY_NAME[name]


def coreai_dtype(name: str):
    """The authoring API's dtype singleton (float16, int4, ...)."""
    import coreai.authoring as authoring

    return getattr(authoring, name)
