"""The op catalog: one module per op, each turning params + weights into a MIL program.

from app.kernels import compile_kernel
zip_bytes = compile_kernel("conv", {"in_channels": 64, "out_channels": 64, "spatial": 16},
                           {"weight": w}, format="mlpackage", target="ios18")
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.kernels.catalog import KERNELS, KernelBuild, build_kernel, get_kernel, parse_params
from app.kernels.spec import Kernel, KernelSpecError, WeightSpec

IN_MEMORY_BYTES = 16 << 20


def compile_kernel(
    op: str,
    params: Mapping[str, Any],
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    format: str = "mlpackage",
    target: str = "ios18",
    name: str | None = None,
    random_seed: int | None = None,
) -> bytes:
    """Build a catalog kernel and return its zip (mlpackage or mil bundle) as bytes."""
    from app.packaging import FORMATS, write_kernel_zip

    if format not in FORMATS:
        raise KernelSpecError("format", f"unknown format {format!r}; one of {', '.join(FORMATS)}")
    build = build_kernel(op, params, weights, target=target, name=name, random_seed=random_seed)
    # Small zips are built in memory; large ones go through a temporary file, because a growing
    # in-memory buffer would briefly hold a big zip twice.
    if sum(w.nbytes for w in build.weights.values()) < IN_MEMORY_BYTES:
        buffer = io.BytesIO()
        write_kernel_zip(build, buffer, format)
        return buffer.getvalue()
    with tempfile.TemporaryFile() as f:
        write_kernel_zip(build, f, format)
        f.seek(0)
        return f.read()


__all__ = [
    "KERNELS",
    "Kernel",
    "KernelBuild",
    "KernelSpecError",
    "WeightSpec",
    "build_kernel",
    "compile_kernel",
    "get_kernel",
    "parse_params",
]
