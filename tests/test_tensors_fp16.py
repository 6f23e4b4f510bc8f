"""fp16 finiteness read off the bits, against NumPy's own isfinite: every bit pattern, a value
at a chunk's edge, and a transposed view (read as it is)."""

from __future__ import annotations

import numpy as np

from app.tensors import fp16
from app.tensors.fp16 import all_finite


def test_every_bit_pattern_agrees_with_numpy():
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.isfinite(values)
    for one in (values[finite][::97], values[~finite]):
        for value in one:
            assert all_finite(np.array([value])) == bool(np.isfinite(value))
    assert all_finite(values[finite]) and not all_finite(values)
    assert all_finite(np.empty(0, np.float16))


def test_the_last_chunk_and_a_view_are_read():
    size = 2 * fp16._CHUNK + 3
    weight = np.zeros(size, np.float16)
    assert all_finite(weight)
    weight[-1] = np.inf  # in the short last chunk
    assert not all_finite(weight)
    square = np.ones((64, 64), np.float16)
    square[3, 60] = np.nan
    assert not all_finite(square.T) and not square.T.flags.c_contiguous
    assert all_finite(np.ones((64, 64), np.float16).T)
