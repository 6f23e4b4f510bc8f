"""The compiled k-means (app/quantize/native/_kmeans1d.c) against coremltools' bundled kmeans1d:
the same clusters and the same centroid bytes on random, tied, evenly spaced (every split a tie),
clustered, heavily weighted and degenerate inputs, for every k; and the palettes a weight gets
through it equal to those of the per-group path through kmeans1d (coremltools' grouping)."""

import os

import numpy as np
import pytest

from app.quantize import palettize as palettize_module
from app.quantize.compress import quantize
from app.quantize.config import PalettizeConfig
from app.quantize.kmeans import cluster, compiled, group_palettes, kmeans_palette
from app.quantize.palettize import palette_workers

pytestmark = pytest.mark.skipif(
    not compiled(), reason="app/quantize/native/_kmeans1d not built (no C compiler at install)"
)


def native_cluster(values, weights, k):
    from app.quantize.native import _kmeans1d

    clusters, centroids = np.zeros(len(values), np.uint8), np.zeros(k, np.float64)
    _kmeans1d.cluster(values, weights, k, clusters, centroids)
    return clusters, centroids


def inputs(seed):
    """(name, increasing float64 values, positive weights) of many kinds."""
    g = np.random.default_rng(seed)
    n = int(g.integers(1, 160))
    fp16 = np.unique((g.standard_normal(n) * 10.0 ** g.uniform(-6, 3)).astype(np.float16))
    yield "fp16 counts", fp16.astype(np.float64), g.integers(1, 400, len(fp16)).astype(np.float64)
    yield "equal weights", np.unique(g.standard_normal(n)), None
    yield "evenly spaced", np.arange(n, dtype=np.float64), None
    yield "evenly spaced, symmetric weights", np.arange(n, dtype=np.float64) - n // 2, "mirror"
    yield "small integers", np.unique(g.integers(-6, 7, n)).astype(np.float64), None
    centres = g.normal(0, 5, 4)
    clumps = np.unique(np.concatenate([g.normal(c, 1e-4, n // 4 + 1) for c in centres]))
    yield "clumps, huge weights", clumps, np.round(10.0 ** g.uniform(0, 9, len(clumps)))
    yield "one value", np.array([float(g.standard_normal())]), None
    yield "extremes", np.array([-65504.0, -6e-8, 0.0, 6e-8, 1.0, 65504.0]), None


@pytest.mark.parametrize("seed", range(12))
def test_clustering_is_kmeans1ds(seed):
    for name, values, weights in inputs(seed):
        if weights is None:
            weights = np.ones(len(values))
        elif isinstance(weights, str):  # mirror: a weight per distance from the middle
            weights = 1.0 + np.abs(values)
        n = len(values)
        for k in sorted({1, 2, 3, 4, 7, 8, 16, 64, 256, n} & set(range(1, min(n, 256) + 1))):
            want_clusters, want_centroids = cluster(values, weights, k)
            clusters, centroids = native_cluster(values, weights, k)
            np.testing.assert_array_equal(clusters, want_clusters, err_msg=f"{name}, k={k}")
            assert centroids.tobytes() == want_centroids.tobytes(), f"{name}, k={k}"


def test_clustering_a_weight_sized_group():
    """A group of 32 channels of a bf16-like checkpoint: thousands of distinct values."""
    w = np.random.default_rng(1).standard_normal((32, 512), dtype=np.float32) * 0.02
    w16 = (w.view(np.uint32) >> 16 << 16).view(np.float32).astype(np.float16)
    values, counts = np.unique(w16, return_counts=True)
    for k in (16, 64):
        want = cluster(values.astype(np.float64), counts.astype(np.float64), k)
        got = native_cluster(values.astype(np.float64), counts.astype(np.float64), k)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_group_palettes_are_each_groups_palette(workers):
    g = np.random.default_rng(2)
    values = np.concatenate(
        [
            g.standard_normal((3, 300)).astype(np.float16),
            g.integers(-2, 3, (2, 300)).astype(np.float16),
            np.full((1, 300), -0.0, np.float16),
            np.where(g.random((1, 300)) < 0.5, -0.0, 0.0).astype(np.float16),
            np.full((1, 300), 0.125, np.float16),
        ]
    )
    for nbits in (1, 2, 4, 8):
        lut, indices = group_palettes(values.view(np.uint16), nbits, workers)
        for row, group in enumerate(values):
            want_lut, want_indices = kmeans_palette(group, nbits)
            assert lut[row].tobytes() == want_lut.tobytes()
            np.testing.assert_array_equal(indices[row], want_indices)


def params(weight, config, target, channel_axis, monkeypatch, native):
    monkeypatch.setattr(palettize_module, "compiled", lambda: native)
    compressed = quantize(weight, config, target, channel_axis=channel_axis)
    return {name: p for op in compressed.ops for name, p in op.params.items()}, compressed


@pytest.mark.parametrize(
    "config, target, channel_axis, shape",
    [
        (PalettizeConfig(4, "per_grouped_channel", 8), "ios18", 0, (32, 40)),
        (PalettizeConfig(3, "per_grouped_channel", 4), "ios18", 1, (24, 16)),
        (PalettizeConfig(2, "per_grouped_channel", 2), "ios18", 1, (3, 4, 5)),
        (PalettizeConfig(4), "ios18", 0, (48, 50)),
        (PalettizeConfig(6), "ios17", 0, (40, 30)),
        (PalettizeConfig(8), "ios18", 0, (30, 64)),
    ],
)
def test_palettize_through_the_compiled_module_is_through_kmeans1d(
    config, target, channel_axis, shape, monkeypatch
):
    g = np.random.default_rng(3)
    weight = g.standard_normal(shape).astype(np.float16)
    weight.reshape(-1)[g.random(weight.size) < 0.3] = 0.5  # ties
    got, got_weight = params(weight, config, target, channel_axis, monkeypatch, True)
    want, want_weight = params(weight, config, target, channel_axis, monkeypatch, False)
    assert got.keys() == want.keys()
    for name in got:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].array.dtype == want[name].array.dtype, name
        assert got[name].array.shape == want[name].array.shape, name
        np.testing.assert_array_equal(got[name].array, want[name].array, err_msg=name)
        assert got[name].array.tobytes() == want[name].array.tobytes(), name
    assert got_weight.decompressed.tobytes() == want_weight.decompressed.tobytes()


def test_palette_threads_default_to_the_cores_and_follow_the_setting(monkeypatch):
    monkeypatch.delenv("ANE_PALETTE_WORKERS", raising=False)
    palette_workers.cache_clear()
    try:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        assert palette_workers() == cores
        monkeypatch.setenv("ANE_PALETTE_WORKERS", "3")
        palette_workers.cache_clear()
        assert palette_workers() == 3
    finally:
        palette_workers.cache_clear()
