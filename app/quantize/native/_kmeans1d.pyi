# The compiled module's interface (_kmeans1d.c), for the type checker: it reads no C.
import numpy as np

def cluster(
    values: np.ndarray, weights: np.ndarray, k: int, clusters: np.ndarray, centroids: np.ndarray, /
) -> None:
    """kmeans1d's weighted clustering of n increasing float64 values: each value's cluster into
    `clusters` (n uint8), the k centroids into `centroids` (k float64)."""

def palettize(
    bits: np.ndarray,
    each: int,
    size: int,
    rank: np.ndarray,
    value: np.ndarray,
    lut: np.ndarray,
    indices: np.ndarray,
    /,
) -> None:
    """The palette of each group of `each` fp16 patterns in `bits`, from its histogram (`rank`:
    each pattern's place in value order, `value`: the float64 value at each place): `size`
    float64 centroids per group into `lut` (unused 0), each pattern's entry into `indices`."""
