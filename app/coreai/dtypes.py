"""The project's MIL dtypes as Core AI dtypes: one table."""

from __future__ import annotations

import numpy as np

from app.mil import DType

# MIL dtype -> (Core AI authoring dtype name, numpy dtype its buffers hold)
_TABLE = {
    DType.FP16: ("float16", np.float16),
    DType.FP32: ("float32", np.float32),
    DType.INT32: ("int32", np.int32),
    DType.BOOL: ("bool_", np.bool_),
    DType.INT8: ("int8", np.int8),
    DType.UINT8: ("uint8", np.uint8),
    DType.INT16: ("int16", np.int16),
    DType.UINT16: ("uint16", np.uint16),
    DType.INT4: ("int4", np.int8),
    DType.UINT4: ("uint4", np.uint8),
    DType.UINT2: ("uint2", np.uint8),
}


# Index arguments (permutations, tile repetitions) that MIL writes as int32.
_INDEX_ONLY = {"uint32": np.uint32}


def has_dtype(dtype: DType) -> bool:
    return dtype in _TABLE


def dtype_name(dtype: DType) -> str:
    """The Core AI dtype name of a MIL dtype (KeyError: it has none)."""
    return _TABLE[dtype][0]


def numpy_dtype(name: str) -> np.dtype:
    for coreai_name, numpy in _TABLE.values():
        if coreai_name == name:
            return np.dtype(numpy)
    return np.dtype(_INDEX_ONLY[name])


def coreai_dtype(name: str):
    """The authoring API's dtype singleton (float16, int4, ...)."""
    import coreai.authoring as authoring

    return getattr(authoring, name)
