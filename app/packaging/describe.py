"""kernel.json: what a zip holds, for people and build farms (op, params, I/O, weight digests,
toolchain versions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from app import GENERATOR, __version__
from app.core.digest import tensor_digest
from app.core.toolchain import coremltools_version, generator
from app.mil import Program, Var


def build_info() -> dict[str, str]:
    """The program's buildInfo attribute (model.mil header and protobuf)."""
    return {f"{GENERATOR}-version": __version__, "coremltools-version": coremltools_version()}


def _io(var: Var) -> dict[str, Any]:
    return {"name": var.name, "shape": list(var.tensor.shape), "dtype": var.tensor.dtype.value}


def describe(
    *,
    op: str,
    params: Mapping[str, Any],
    name: str,
    fmt: str,
    program: Program,
    weights: Mapping[str, np.ndarray],
    stored: Mapping[str, str],
    quantized: Mapping[str, Mapping[str, Any]] | None = None,
    digests: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    main = program.main
    digests = digests or {}
    quantized = quantized or {}
    return {
        "op": op,
        "name": name,
        "params": dict(params),
        "format": fmt,
        "target": program.target.name,
        "specification_version": program.target.spec_version,
        "opset": program.target.opset,
        "inputs": [_io(v) for v in main.inputs if v.type == v.tensor],
        "states": [_io(v) for v in main.inputs if v.type != v.tensor],
        "outputs": [_io(v) for v in main.outputs],
        # one weight at a time: weights read on demand are read (and let go) here in turn
        "weights": {
            key: _weight(weights[key], stored[key], digests.get(key), (quantized or {}).get(key))
            for key in sorted(weights)
        },
        "generator": generator(),
        "coremltools_version": coremltools_version(),
        # model.mil names no default function (Apple's printer sorts them): kernel.json does
        **({"default_function": program.default} if program.multifunction else {}),
        **(extra or {}),
    }


def _weight(
    array: np.ndarray,
    stored: str,
    digest: str | None,
    quantized: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return {
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "stored_dtype": stored,
        "sha256": digest or tensor_digest(array),
        **({"quantized": dict(quantized)} if quantized is not None else {}),
    }


def to_json(data: Mapping[str, Any]) -> bytes:
    """Stable, human-readable JSON (sorted keys, 2-space indent, trailing newline)."""
    return orjson.dumps(
        data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    )
