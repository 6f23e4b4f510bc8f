"""The arrays a built program takes, from the arrays its ONNX model takes: `program_inputs`.

An ONNX model's ids and masks are int64; the program's integer inputs are int32 (docs/onnx.md),
and Core ML casts what it is given without looking. Each integer array is held to int32's range
here, naming the input, so an id beyond it is refused before it wraps; floats are cast to the
program's fp16 or fp32 and held to that range. Inputs may be named as the model names them or
as the program does (kernel.json's `onnx.inputs` maps one to the other).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

_DTYPES: dict[str, type[np.generic]] = {
    "fp16": np.float16,
    "fp32": np.float32,
    "int32": np.int32,
    "bool": np.bool_,
}


class InputError(ValueError):
    """An input the program cannot take as given: names the input and what is wrong."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(f"input {name!r}: {message}")


def _kernel(artifact: str | Path | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(artifact, Mapping):
        return artifact
    source = io.BytesIO(artifact) if isinstance(artifact, bytes) else artifact
    with zipfile.ZipFile(source) as zf:
        return json.loads(zf.read("kernel.json"))


def program_inputs(
    artifact: str | Path | bytes | Mapping[str, Any], inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`inputs` (by ONNX or program name) as the program built from the model takes them (by
    program name, in its dtypes), from the artifact's zip (a path or its bytes) or its parsed
    kernel.json. Raises InputError naming the input: unknown, missing, of another shape,
    floats for an integer input, or a value beyond the input's dtype (an int64 id over int32)."""
    kernel = _kernel(artifact)
    renamed = dict(kernel.get("onnx", {}).get("inputs", {}))
    declared = {i["name"]: i for i in kernel["inputs"]}
    given: dict[str, np.ndarray] = {}
    for name, value in inputs.items():
        program_name = renamed.get(name, name)
        if program_name not in declared:
            raise InputError(name, f"unknown; the program takes {', '.join(declared)}")
        given[program_name] = np.asarray(value)
    out = {}
    for name, spec in declared.items():
        if name not in given:
            raise InputError(name, f"missing ({spec['dtype']}, shape {spec['shape']})")
        out[name] = _converted(name, given[name], spec)
    return out


def _converted(name: str, array: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    dtype = np.dtype(_DTYPES[spec["dtype"]])
    if list(array.shape) != list(spec["shape"]):
        raise InputError(name, f"shape {list(array.shape)}, the program takes {spec['shape']}")
    if dtype.kind == "i":
        if array.dtype.kind not in "iub":
            raise InputError(name, f"{array.dtype} values for an {spec['dtype']} input")
        info = np.iinfo(dtype)
        if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
            bad = int(array.min()) if int(array.min()) < info.min else int(array.max())
            raise InputError(
                name, f"holds {bad}, beyond {spec['dtype']}'s range [{info.min}, {info.max}]"
            )
    elif dtype.kind == "f" and array.size and array.dtype.kind in "iuf":
        limit = float(np.finfo(dtype).max)
        finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
        if finite.size and float(np.abs(finite).max()) > limit:
            raise InputError(name, f"has values beyond ±{limit:g}, the {spec['dtype']} range")
    return np.ascontiguousarray(array.astype(dtype))
