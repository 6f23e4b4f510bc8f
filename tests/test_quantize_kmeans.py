"""The histogram k-means (app/quantize/kmeans.py) against coremltools' element k-means
(`_get_kmeans_lookup_table_and_weight(..., force_kmeans1d=True)`, which sorts the elements): the
same LUT bytes and the same index of every element, on random tensors, ties, zeros of both signs,
constant tensors and the fp16 extremes."""

import numpy as np
import pytest

from app.quantize.coremltools_parts import _get_kmeans_lookup_table_and_weight
from app.quantize.kmeans import PATTERNS, distinct_values, kmeans_palette


def element_kmeans(values: np.ndarray, nbits: int) -> tuple[np.ndarray, np.ndarray]:
    lut, indices = _get_kmeans_lookup_table_and_weight(nbits, values, force_kmeans1d=True)
    return lut.astype(np.float16), np.asarray(indices, np.uint8)


def assert_same_palette(values: np.ndarray, nbits: int) -> None:
    lut, indices = kmeans_palette(values, nbits)
    want_lut, want_indices = element_kmeans(values, nbits)
    assert lut.dtype == np.float16 and lut.shape == (1 << nbits,)
    assert lut.tobytes() == want_lut.tobytes()  # bytes: the sign of a zero entry counts too
    np.testing.assert_array_equal(indices, want_indices)


rng = np.random.default_rng(7)
TENSORS = {
    "normal": rng.standard_normal((48, 200)).astype(np.float16),
    "bf16-like": (
        (rng.standard_normal((64, 128), dtype=np.float32).view(np.uint32) >> 16 << 16)
        .view(np.float32)
        .astype(np.float16)
    ),
    "ties": rng.integers(-5, 6, (40, 40)).astype(np.float16),
    "few values": rng.choice(np.array([-1.5, 0.25, 3.0], np.float16), (30, 30)),
    "signed zeros": np.array([[-0.0, 0.0, 1.0, -0.0], [2.0, 0.0, -0.0, 1.0]], np.float16),
    "only zeros": np.where(rng.random((8, 8)) < 0.5, -0.0, 0.0).astype(np.float16),
    "constant": np.full((16, 9), -0.375, np.float16),
    "one element": np.array([[0.1]], np.float16),
    "extremes": np.array([[65504, -65504, 6e-8, -6e-8, 0.0, 1.0]], np.float16),
    "subnormals": (rng.standard_normal((20, 20)) * 1e-6).astype(np.float16),
}


@pytest.mark.parametrize("nbits", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("name", TENSORS)
def test_histogram_palette_is_the_element_palette(name, nbits):
    assert_same_palette(TENSORS[name], nbits)


@pytest.mark.parametrize("seed", range(5))
def test_histogram_palette_on_random_shapes_and_scales(seed):
    g = np.random.default_rng(seed)
    shape = tuple(int(n) for n in g.integers(1, 90, 2))
    values = (g.standard_normal(shape) * 10.0 ** g.uniform(-4, 2)).astype(np.float16)
    values.reshape(-1)[g.random(values.size) < 0.2] = values.reshape(-1)[0]  # ties
    assert_same_palette(values, int(g.choice([2, 3, 4, 6])))


def test_distinct_values_are_nps_unique():
    values = TENSORS["signed zeros"]
    patterns, counts = distinct_values(values.view(np.uint16))
    want, want_counts = np.unique(values, return_counts=True)
    np.testing.assert_array_equal(patterns.view(np.float16), want)
    np.testing.assert_array_equal(counts, want_counts)
    assert patterns.max() < PATTERNS


def test_histogram_palette_takes_fp16_only():
    with pytest.raises(TypeError, match="fp16"):
        kmeans_palette(np.zeros((2, 2), np.float32), 4)
