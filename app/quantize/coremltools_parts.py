"""The coremltools helpers the quantizers call, imported in one place and quietly: on Linux the
first import of coremltools' model modules prints a line for each macOS-only library it lacks,
which would land on every command's stderr."""

from app.toolchain import quiet_coremltools

with quiet_coremltools():
    from coremltools.models.neural_network.quantization_utils import (
        _get_kmeans_lookup_table_and_weight,
    )
    from coremltools.optimize import _utils as ct_utils
    from coremltools.optimize.coreml._quantization_passes import (
        linear_quantize_weights,
        palettize_weights,
        prune_weights,
    )

__all__ = [
    "_get_kmeans_lookup_table_and_weight",
    "ct_utils",
    "linear_quantize_weights",
    "palettize_weights",
    "prune_weights",
]
