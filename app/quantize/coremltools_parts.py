"""The coremltools helpers the quantizers call, imported in one place and quietly: on Linux the
first import of coremltools' model modules prints a line for each macOS-only library it lacks,
which would land on every command's stderr."""

from app.core.toolchain import quiet_coremltools

with quiet_coremltools():
    from coremltools._deps.kmeans1d import core as _kmeans1d_core
    from coremltools.models.neural_network.quantization_utils import (
        _get_kmeans_lookup_table_and_weight,
    )
    from coremltools.optimize import _utils as ct_utils
    from coremltools.optimize.coreml._quantization_passes import (
        linear_quantize_weights,
        palettize_weights,
        prune_weights,
    )


def kmeans1d_library():
    """The C library of coremltools' bundled kmeans1d (its `cluster` wrapper calls
    `cluster_with_weights` in it), loaded through ctypes, which releases the GIL during a call."""
    return _kmeans1d_core._DLL


__all__ = [
    "_get_kmeans_lookup_table_and_weight",
    "ct_utils",
    "kmeans1d_library",
    "linear_quantize_weights",
    "palettize_weights",
    "prune_weights",
]
