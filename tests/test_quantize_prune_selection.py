"""Pruning's selection (app/quantize/prune.py) against coremltools' `compress_by_magnitude` on the
same fp16 weight: the same kept values and the same packed mask, with ties at the percentile,
zeros of both signs and constant weights."""

import numpy as np
import pytest

from app.quantize.coremltools_parts import prune_weights
from app.quantize.prune import _by_magnitude

rng = np.random.default_rng(3)
WEIGHTS = {
    "normal": rng.standard_normal((24, 40)).astype(np.float16),
    "ties": rng.integers(-2, 3, (16, 16)).astype(np.float16),
    "signed zeros": np.where(rng.random((8, 8)) < 0.5, -0.0, 1.5).astype(np.float16),
    "constant": np.full((4, 6), 0.75, np.float16),
    "tiny": (rng.standard_normal((10, 10)) * 1e-6).astype(np.float16),
}


@pytest.mark.parametrize("sparsity", [0.1, 0.5, 0.75, 0.99])
@pytest.mark.parametrize("name", WEIGHTS)
def test_selection_is_coremltools_selection(name, sparsity):
    w = WEIGHTS[name]
    kept, mask = _by_magnitude(w, sparsity)
    want = prune_weights.compress_by_magnitude(w, sparsity)
    assert kept.dtype == w.dtype and kept.tobytes() == want.nonzero_data.tobytes()
    assert np.packbits(mask.reshape(-1), bitorder="little").tobytes() == want.mask.tobytes()
    assert mask.shape == w.shape
