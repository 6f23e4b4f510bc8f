"""Compiled helpers of the quantizers, each optional (an install without a C compiler goes on
without them): `_kmeans1d`, coremltools' kmeans1d clustering computed the same way, faster
(app/quantize/kmeans.py says when it is used).

A package of its own that imports nothing, as app/checkpoints/native is.
"""
