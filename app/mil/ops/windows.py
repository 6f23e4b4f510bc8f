"""The window arithmetic pools and convolutions share: padding by `pad_type`, output sizes with
and without `ceil_mode`, and strided views of a padded input, as coremltools' `_utils.py`
(`aggregated_pad`, `spatial_dimensions_out_shape`) defines them."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

PAD_TYPES = ("valid", "same", "custom", "same_lower")


class WindowError(ValueError):
    """A window argument that does not fit the input: which argument, and why."""

    def __init__(self, arg: str, message: str):
        super().__init__(message)
        self.arg = arg


def pads(
    pad_type: str,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    custom: Sequence[int] | None,
) -> list[tuple[int, int]]:
    """(before, after) per spatial axis. `same` pads so that out = ceil(in / stride), the odd
    element after; `same_lower` puts it before."""
    if pad_type not in PAD_TYPES:
        raise WindowError("pad_type", f"{pad_type!r} is not one of {', '.join(PAD_TYPES)}")
    n = len(sizes)
    if pad_type == "valid":
        return [(0, 0)] * n
    if pad_type == "custom":
        given = list(custom) if custom is not None else [0] * (2 * n)
        if len(given) != 2 * n or min(given, default=0) < 0:
            raise WindowError("pad", f"needs {2 * n} entries >= 0, got {given}")
        return [(given[2 * i], given[2 * i + 1]) for i in range(n)]
    out = []
    for size, k, s in zip(sizes, kernel, strides, strict=True):
        total = max(0, s * math.ceil(size / s) - size + k - s)
        small, large = total // 2, total - total // 2
        out.append((small, large) if pad_type == "same" else (large, small))
    return out


def out_sizes(
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    ceil_mode: bool = False,
) -> list[int]:
    """Output size per spatial axis. In ceil mode the last window may start in the padding
    after the input, unless it would start there entirely (coremltools' correction)."""
    out = []
    for size, k, s, (before, after) in zip(sizes, kernel, strides, padding, strict=True):
        total = before + after
        if ceil_mode:
            n = (size + total - k + s - 1) // s + 1
            if (n - 1) * s >= size + total / 2 and total > 0:
                n -= 1
        else:
            n = (size + total - k) // s + 1
        if n < 1:
            raise WindowError("kernel_sizes", f"a window of {k} does not fit an input of {size}")
        out.append(n)
    return out


def spatial_args(
    rank: int,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None = None,
    kernel: Sequence[int] | None = None,
) -> tuple[list[int], list[int]]:
    """Strides and dilations, defaulted to ones and checked against the spatial rank."""
    n = rank - 2
    got_strides = list(strides) if strides is not None else [1] * n
    got_dilations = list(dilations) if dilations is not None else [1] * n
    for arg, values in (("strides", got_strides), ("dilations", got_dilations)):
        if len(values) != n or min(values, default=1) < 1:
            raise WindowError(arg, f"needs {n} entries >= 1, got {values}")
    if kernel is not None and (len(kernel) != n or min(kernel, default=1) < 1):
        raise WindowError("kernel_sizes", f"needs {n} entries >= 1, got {list(kernel)}")
    return got_strides, got_dilations


def windows(
    padded: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    out: Sequence[int],
    dilations: Sequence[int] | None = None,
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """Per kernel offset, the strided view of the (padded) input its taps read: one array of
    the output's spatial shape per offset."""
    n = len(kernel)
    dil = dilations or [1] * n
    for k in np.ndindex(*kernel):
        index = tuple(
            slice(k[i] * dil[i], k[i] * dil[i] + (out[i] - 1) * strides[i] + 1, strides[i])
            for i in range(n)
        )
        key: tuple[Any, ...] = (..., *index)
        yield k, padded[key]
