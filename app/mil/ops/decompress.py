"""Reference decompression of the compressed-weight ops, in NumPy, independent of coremltools.

Each function returns the decompressed values in float64 (the data and mask ops their exact
values); the executor then rounds once to the op's declared dtype. For the integer data these ops
carry, `(q - offset)` is exact in any float type and the product of two values of the scale's
dtype is exact in float64, so `· scale` is the one rounding and the result equals coremltools' own
decompression (which computes in the scale's dtype, or in fp32 for affine_dequantize) bit for bit.
tests/test_mil_constexpr.py and tests/test_quantize_programs.py compare the two.
"""

from __future__ import annotations

import numpy as np

from app.language.dtypes import DType
from app.language.packing import unpack_bits
from app.mil.args import Args

# The iOS16 `indices` of an n-bit palette: unsigned, packed LSB first.
_INDEX_DTYPES = {1: DType.UINT1, 2: DType.UINT2, 4: DType.UINT4, 6: DType.UINT6, 8: DType.UINT8}


def _per_block(param: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A scale/offset of the data's rank, each entry repeated over its block of `shape`."""
    for axis, (d, p) in enumerate(zip(shape, param.shape, strict=True)):
        if p != d:
            param = np.repeat(param, d // p, axis=axis)
    return param


def affine_dequantize(a: Args) -> np.ndarray:
    q = a.f64("quantized_data")
    axis = int(a.const("axis")) % q.ndim
    shape = [1] * q.ndim
    shape[axis] = -1

    def along_axis(arg: str) -> np.ndarray:
        value = a.f64(arg)
        return value.reshape(shape) if value.ndim == 1 else value

    return (q - along_axis("zero_point")) * along_axis("scale")


def _lut_to_dense_ios16(a: Args) -> np.ndarray:
    lut = a.f64("lut")
    shape = tuple(int(d) for d in a["shape"])
    index_dtype = _INDEX_DTYPES[int(np.log2(lut.size))]
    indices = unpack_bits(np.asarray(a["indices"], np.uint8), index_dtype, int(np.prod(shape)))
    return lut[indices].reshape(shape)


def _sparse_to_dense_ios16(a: Args) -> np.ndarray:
    shape = tuple(int(d) for d in a["shape"])
    size = int(np.prod(shape))
    present = np.unpackbits(np.asarray(a["mask"], np.uint8), bitorder="little")[:size] != 0
    out = np.zeros(size)
    out[present] = a.f64("nonzero_data")
    return out.reshape(shape)


def _shift_scale(data: np.ndarray, a: Args) -> np.ndarray:
    if a.has("offset"):
        # coremltools subtracts in the scale's dtype: exact for integer offsets, one rounding
        # before the product for float ones, which the definition does not otherwise fix.
        dtype = np.asarray(a["scale"]).dtype
        diff = data - _per_block(a.f64("offset"), data.shape)
        data = diff.astype(dtype).astype(np.float64)
    return data * _per_block(a.f64("scale"), data.shape)


def blockwise_shift_scale(a: Args) -> np.ndarray:
    return _shift_scale(a.f64("data"), a)


def lut_to_dense(a: Args) -> np.ndarray:
    """iOS18 form: lut [G0, ..., Gk-1, 2^n, V]; element i reads table (i0 // (d0/G0), ...), and
    vector entries fill `vector_axis` (V consecutive outputs per index). iOS16 form: with `shape`."""
    if a.has("shape"):
        return _lut_to_dense_ios16(a)
    indices = np.asarray(a["indices"]).astype(np.int64)
    lut = a.f64("lut")
    groups = lut.shape[: indices.ndim]
    table = np.zeros(indices.shape, np.int64)  # flat table number of every element
    for axis, (d, g) in enumerate(zip(indices.shape, groups, strict=True)):
        view = [1] * indices.ndim
        view[axis] = d
        table = table * g + (np.arange(d) // (d // g)).reshape(view)
    vectors = lut.reshape(-1, lut.shape[-2], lut.shape[-1])[table, indices]  # [*shape, V]
    if lut.shape[-1] == 1:
        return vectors[..., 0]
    axis = int(a.const("vector_axis")) % indices.ndim
    shape = list(indices.shape)
    shape[axis] *= lut.shape[-1]
    return np.moveaxis(vectors, -1, axis + 1).reshape(shape)


def _scatter(nonzero: np.ndarray, mask: np.ndarray) -> np.ndarray:
    out = np.zeros(mask.shape)
    out[mask != 0] = nonzero
    return out


def sparse_to_dense(a: Args) -> np.ndarray:
    if a.has("shape"):  # iOS16 form: a byte-packed mask and the shape
        return _sparse_to_dense_ios16(a)
    return _scatter(a.f64("nonzero_data"), a["mask"])


def sparse_blockwise_shift_scale(a: Args) -> tuple[np.ndarray, np.ndarray]:
    """(mask, dequantized nonzero values): the data scattered to its dense place, so each value
    meets the scale and offset of its block, then gathered again."""
    mask = np.asarray(a["data_mask"])
    dense = _shift_scale(_scatter(a.f64("nonzero_data"), mask), a)
    return mask, dense[mask != 0]
