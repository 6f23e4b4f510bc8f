"""Linear quantization's blocks (app/quantize/linear.py) against coremltools'
`blockwise_compress_by_dtype` on the same fp16 weight: the same scales (bytes), offsets and
integers, for every dtype, both modes and the three granularities, on weights with zeros of
both signs, all-zero blocks, one-signed and integer-valued ones, and extreme scales."""

import itertools

import numpy as np
import pytest

from app.quantize.coremltools_parts import linear_quantize_weights
from app.quantize.linear import _blocked_shape, _over_blocks, quantize_blocks

SIZES = {"per_tensor": [0, 0], "per_channel": [1, 0], "per_block": [1, 8]}


def coremltools_blocks(w, dtype, symmetric, sizes):
    mode = "LINEAR_SYMMETRIC" if symmetric else "LINEAR"
    with np.errstate(all="ignore"):
        params = linear_quantize_weights.blockwise_compress_by_dtype(w, dtype, mode, sizes)
    plain = np.dtype(params.data.dtype.str)
    offset = None if params.offset is None else np.asarray(params.offset).astype(plain)
    return params.data.astype(plain), np.asarray(params.scale, w.dtype), offset


def weight(kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 6)) * 4, int(rng.integers(1, 6)) * 8)
    w = rng.standard_normal(shape) * 10.0 ** rng.uniform(-5, 2)
    if kind == "positive":
        w = np.abs(w)
    elif kind == "negative":
        w = -np.abs(w)
    elif kind == "sparse":
        w[rng.random(shape) < 0.5] = 0.0
    elif kind == "zero rows":
        w[: shape[0] // 2] = 0.0
        w[0, ::2] = -0.0
    elif kind == "integers":
        w = rng.integers(-3, 4, shape).astype(float)
    return w.astype(np.float16)


KINDS = ["normal", "positive", "negative", "sparse", "zero rows", "integers"]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", KINDS)
def test_blocks_are_coremltools_blocks(kind, seed):
    w = weight(kind, seed)
    for dtype, symmetric, granularity in itertools.product(
        ["int8", "uint8", "int4", "uint4"], [True, False], SIZES
    ):
        got = quantize_blocks(w, dtype, symmetric, SIZES[granularity])
        want = coremltools_blocks(w, dtype, symmetric, SIZES[granularity])
        where = f"{dtype} symmetric={symmetric} {granularity}"
        assert got[1].tobytes() == want[1].tobytes(), where
        # an all-zero block has scale 0: coremltools' integers there are NaN cast (anything),
        # ours zeros, which decompress to the same zeros
        blocked = _blocked_shape(w.shape, want[1].shape)
        zero = np.broadcast_to(_over_blocks(want[1] == 0, blocked), blocked).reshape(w.shape)
        assert not got[0][zero].any(), where
        np.testing.assert_array_equal(got[0][~zero], want[0][~zero], err_msg=where)
        assert (got[2] is None) == (want[2] is None), where
        if got[2] is not None:
            kept = want[1] != 0
            np.testing.assert_array_equal(got[2][kept], want[2][kept], err_msg=where)
