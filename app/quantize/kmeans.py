"""coremltools' k-means palette of an fp16 tensor, computed from the tensor's histogram.

coremltools (`_get_kmeans_lookup_table_and_weight(nbits, w, force_kmeans1d=True)`) sorts the
elements (`np.unique`) for the distinct values and their counts, then runs its bundled `kmeans1d`,
the optimal 1-D k-means: a dynamic programme over the sorted distinct values, weighted by their
counts. An fp16 tensor has at most 65,536 bit patterns, so the same distinct values and counts
come from one `np.bincount` over its uint16 view, put in value order by one fixed permutation of
the patterns (−0 counted with +0, which `np.unique` takes as equal). `kmeans1d` gets the same
input and gives the same centroids and clusters, and each element's index is its pattern's
cluster, looked up: two passes over the elements instead of a sort of them (0.02 s against
0.9 s for 3 M elements). The clustering is the same C function, called on the arrays' memory
rather than through its Python wrapper's per-element lists, which releases the GIL while it runs.

Where app/quantize/native/_kmeans1d.c was built, `group_palettes` does all of this for every
group of a weight in one call, GIL released: the histogram, and the clustering computed the way
kmeans1d computes it (the same floating-point expressions and comparisons in the same order, so
the same centroids and clusters, ties included; tests/test_quantize_kmeans_native.py), about six
times faster than kmeans1d's own routine when measured (1.4 against 9 ms for 2,700 distinct
values, 16 clusters; 1.07 ms a Qwen3 group since the reuse of entries and the packed sums,
BENCHMARKS.md "Quantized model kits"). Without it, `kmeans_palette` and kmeans1d give the same bytes.
"""

from __future__ import annotations

import ctypes
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from app.quantize.coremltools_parts import kmeans1d_library

try:
    from app.quantize.native import _kmeans1d
except ImportError:  # not built (no C compiler at install): kmeans1d itself clusters
    _kmeans1d = None  # type: ignore[assignment]  # the checker reads the module's stub, always there

PATTERNS = 1 << 16
_NEG_ZERO = 0x8000
# Every fp16 bit pattern in value order: the stable sort keeps +0 (0x0000) first among the
# zeros; NaNs go last (a quantized weight has none: `as_weight` refuses them).
_ALL = np.arange(PATTERNS, dtype=np.uint32).astype(np.uint16)
_BY_VALUE = np.argsort(_ALL.view(np.float16), kind="stable").astype(np.uint16)
# Each pattern's place in that order (−0 at +0's), and the value at each place.
_RANK = np.empty(PATTERNS, np.uint16)
_RANK[_BY_VALUE] = np.arange(PATTERNS, dtype=np.uint32).astype(np.uint16)
_RANK[_NEG_ZERO] = _RANK[0]
_VALUE = _BY_VALUE.view(np.float16).astype(np.float64)
_ULONG = np.dtype(f"u{ctypes.sizeof(ctypes.c_ulong)}")
_DOUBLES = ctypes.POINTER(ctypes.c_double)
_ULONGS = ctypes.POINTER(ctypes.c_ulong)


def distinct_values(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct fp16 values of `bits` (their uint16 patterns, finite), in increasing order,
    and how often each occurs: `np.unique(values, return_counts=True)` of the fp16 values."""
    counts = np.bincount(bits.reshape(-1), minlength=PATTERNS)
    counts[0] += counts[_NEG_ZERO]
    counts[_NEG_ZERO] = 0
    patterns = _BY_VALUE[counts[_BY_VALUE] > 0]
    return patterns, counts[patterns]


def kmeans_palette(values: np.ndarray, nbits: int) -> tuple[np.ndarray, np.ndarray]:
    """The 2^nbits-entry fp16 LUT (unused entries 0) and each element's index (uint8, flat) of an
    fp16 array: `_get_kmeans_lookup_table_and_weight(nbits, values, force_kmeans1d=True)`'s, its
    LUT cast to fp16."""
    if values.dtype != np.float16:
        raise TypeError(f"a histogram palette is of fp16 values, not {values.dtype}")
    bits = np.ascontiguousarray(values).view(np.uint16).reshape(-1)
    patterns, counts = distinct_values(bits)
    size = 1 << nbits
    k = min(len(patterns), size)
    clusters, centroids = cluster(
        patterns.view(np.float16).astype(np.float64), counts.astype(np.float64), k
    )
    lut = np.zeros(size, np.float64)
    lut[:k] = centroids
    index_of = np.zeros(PATTERNS, np.uint8)
    index_of[patterns] = clusters
    index_of[_NEG_ZERO] = index_of[0]
    return lut.astype(np.float16), np.take(index_of, bits)


def cluster(values: np.ndarray, weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """kmeans1d's `cluster(values, k, weights=weights)`: each value's cluster and the k
    centroids, for float64 `values` in increasing order."""
    n = len(values)
    values, weights = np.ascontiguousarray(values), np.ascontiguousarray(weights)
    clusters = np.zeros(n, _ULONG)
    centroids = np.zeros(k, np.float64)
    kmeans1d_library().cluster_with_weights(
        values.ctypes.data_as(_DOUBLES),
        weights.ctypes.data_as(_DOUBLES),
        ctypes.c_ulong(n),
        ctypes.c_ulong(k),
        clusters.ctypes.data_as(_ULONGS),
        centroids.ctypes.data_as(_DOUBLES),
    )
    return clusters, centroids


def compiled() -> bool:
    """Whether app/quantize/native/_kmeans1d was built: it computes kmeans1d's clustering (the
    same result, bit for bit; tests/test_quantize_kmeans_native.py) several times faster, and a
    tensor's groups in one call."""
    return _kmeans1d is not None


def group_palettes(bits: np.ndarray, nbits: int, workers: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """`kmeans_palette` of each row of `bits` (groups × elements, the uint16 view of fp16 values),
    computed by the compiled module: the LUTs (groups × 2^nbits fp16) and the indices (uint8,
    shaped like `bits`). `workers` threads take a share of the groups each (the module releases
    the GIL); the result does not depend on how many."""
    if _kmeans1d is None:
        raise RuntimeError("app.quantize.native._kmeans1d is not built")
    bits = np.ascontiguousarray(bits, np.uint16)
    groups, each = bits.shape
    size = 1 << nbits
    lut = np.zeros((groups, size), np.float64)
    indices = np.empty(bits.shape, np.uint8)
    bounds = np.linspace(0, groups, min(max(workers, 1), groups) + 1).astype(int)

    def run(start: int, stop: int) -> None:
        _kmeans1d.palettize(
            bits[start:stop], each, size, _RANK, _VALUE, lut[start:stop], indices[start:stop]
        )

    if len(bounds) <= 2:
        run(0, groups)
    else:
        with ThreadPoolExecutor(len(bounds) - 1) as pool:
            for done in [pool.submit(run, a, b) for a, b in itertools.pairwise(bounds)]:
                done.result()
    return lut.astype(np.float16), indices
