"""Pruning's threshold from a histogram of the magnitudes' bit patterns (app/quantize/prune.py,
`fp16_percentile`) against `np.percentile` of the fp16 magnitudes: the same fp16 value, bit for
bit, on random, tied, constant, tiny and extreme inputs, at percents that land on an element,
between two, below one half of the way and above it."""

import numpy as np
import pytest

from app.quantize.prune import fp16_percentile

PERCENTS = [
    50.0,
    0.5 * 100,
    0.3 * 100,
    0.7 * 100,
    0.9 * 100,
    0.99 * 100,
    0.001 * 100,
    99.999,
    0.0,
    100.0,
]


def magnitudes(seed):
    g = np.random.default_rng(seed)
    n = int(g.integers(1, 400))
    yield g.standard_normal(n).astype(np.float16)
    yield g.integers(-3, 4, n).astype(np.float16)
    yield np.full(n, g.standard_normal(), np.float16)
    yield (g.standard_normal(n) * 10.0 ** g.uniform(-8, 4)).astype(np.float16)
    yield g.choice(np.array([0.0, -0.0, 65504, -6e-8, 1.0], np.float16), n)


@pytest.mark.parametrize("seed", range(20))
def test_threshold_is_nps_percentile(seed):
    g = np.random.default_rng(seed + 1000)
    for values in magnitudes(seed):
        bits = values.view(np.uint16) & np.uint16(0x7FFF)
        for percent in [*PERCENTS, float(g.uniform(0, 100)), float(g.integers(1, 100))]:
            want = np.percentile(bits.view(np.float16), percent)
            got = fp16_percentile(bits, percent)
            assert type(got) is type(want)
            assert got.view(np.uint16) == want.view(np.uint16), (values.size, percent, got, want)


def test_threshold_of_a_weight_sized_tensor():
    values = (np.random.default_rng(5).standard_normal((512, 1536)) * 0.02).astype(np.float16)
    bits = values.view(np.uint16) & np.uint16(0x7FFF)
    for percent in (50.0, 0.25 * 100, 0.875 * 100):
        want = np.percentile(bits.view(np.float16), percent)
        assert fp16_percentile(bits, percent).view(np.uint16) == want.view(np.uint16)
