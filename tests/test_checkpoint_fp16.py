"""The compiled fp32/bf16 -> fp16 conversion (app/checkpoints/native/_fp16.c) gives NumPy's bytes:
round to nearest even, subnormals, overflow to infinity — for every bf16 value and for fp32 edge
and random values — and counts the overflowed and non-finite values as the NumPy path does."""

from __future__ import annotations

import numpy as np
import pytest

from app.checkpoints import convert

pytestmark = pytest.mark.skipif(
    not convert.compiled(), reason="app/checkpoints/native/_fp16 not built or no F16C on this CPU"
)


def _numpy_fp16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float16)


def _same_bytes(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Identical bits wherever NumPy's result is a number or infinity; NaN where it is NaN (a
    checkpoint's NaN is refused, so its payload bits are never kept)."""
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours.view(np.uint16)[~nan], theirs.view(np.uint16)[~nan])


def _fp32_edges() -> np.ndarray:
    tiny = np.float32(2.0**-24)  # the smallest fp16 subnormal
    edges = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65519.996,
        65520.0,
        -65520.0,
        65536.0,
        3.4e38,
        np.inf,
        -np.inf,
        np.nan,
        2.0**-14,
        2.0**-14 * (1 - 2.0**-11),
        tiny,
        tiny / 2,
        tiny / 2 * (1 + 2.0**-20),
        tiny * 1.5,
        tiny * 2.5,
        1 + 2.0**-11,
        1 + 3 * 2.0**-11,
        1 + 2.0**-11 + 2.0**-23,
        1.4e-45,
        -1.4e-45,
        2.0**-25,
        -(2.0**-25) * 1.0000001,
    ]
    values = np.array(edges, np.float32)
    # every fp16 value and the fp32 halfway points between neighbours (ties to even)
    halves = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    mids = ((halves[:-1].astype(np.float64) + halves[1:]) / 2).astype(np.float32)
    return np.concatenate([values, halves, -halves, mids, -mids])


@pytest.mark.parametrize("size_offset", [0, 1, 7, 9])
def test_fp32_edges_and_random_bits_match_numpy(size_offset):
    rng = np.random.default_rng(size_offset)
    random_bits = rng.integers(0, 1 << 32, size=1 << 18, dtype=np.uint64).astype(np.uint32)
    source = np.concatenate([_fp32_edges(), random_bits.view(np.float32)])[size_offset:]
    out = np.empty(source.size, np.float16)
    overflow, nonfinite = convert._compiled_f32(source, out, None)
    _same_bytes(out, _numpy_fp16(source))
    assert (overflow, nonfinite) == convert._from_float(source, np.empty_like(out), None)
    assert nonfinite == np.count_nonzero(~np.isfinite(source)) and overflow > 0


def test_every_bf16_value_matches_numpy_through_float32():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    wide = (bits.astype(np.uint32) << 16).view(np.float32)
    for part in (bits, bits[3:], bits[: (1 << 16) - 5]):  # tails past the 16-value vectors
        out = np.empty(part.size, np.float16)
        counts = convert._compiled_bf16(part, out, None)
        _same_bytes(out, _numpy_fp16((part.astype(np.uint32) << 16).view(np.float32)))
        reference = np.empty_like(out)
        assert counts == convert._from_bf16(part, reference, np.empty(part.size, np.uint16))
    assert convert._compiled_bf16(bits, np.empty(bits.size, np.float16), None) == (
        np.count_nonzero(np.isfinite(wide) & np.isinf(_numpy_fp16(wide))),
        np.count_nonzero(~np.isfinite(wide)),
    )


def test_normal_checkpoint_values_count_nothing():
    rng = np.random.default_rng(0)
    source = rng.standard_normal(100_003, dtype=np.float32)
    out = np.empty(source.size, np.float16)
    assert convert._compiled_f32(source, out, None) == (0, 0)
    _same_bytes(out, _numpy_fp16(source))


def test_mismatched_buffers_are_refused():
    from app.checkpoints.native import _fp16

    with pytest.raises(ValueError, match="one fp16 value per source value"):
        _fp16.convert(0, np.zeros(4, np.float32), np.zeros(3, np.float16))
    with pytest.raises(ValueError, match="kind"):
        _fp16.convert(2, np.zeros(4, np.float32), np.zeros(4, np.float16))
