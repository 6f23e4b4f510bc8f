"""Checkpoint tensors to fp16, chunk by chunk from the memory-mapped file.

Chunks are small enough to stay in the CPU cache while they are converted, and the pages of the
mapping a chunk came from are dropped again (MADV_DONTNEED) once it is done, so converting a
tensor adds its fp16 copy to the process's memory and little else: a model is never resident
twice. NumPy has no bfloat16; bf16 values in the fp16 range convert exactly by moving bits (the
exponent rebiased, the 7 mantissa bits widened to 10), the rest (fp16 subnormals, overflow, NaN)
through float32 and NumPy's cast.

Where the compiled module app/checkpoints/native/_fp16.c was built and the CPU has F16C (x86-64), fp32
and bf16 go through the CPU's own conversion instruction instead, faster than a memory copy:
the same round-to-nearest-even, the same bytes (tests/test_checkpoint_fp16.py checks every bf16
value and fp32 edge values against NumPy's cast).

Values beyond the fp16 range (|x| ≥ 65520 rounds to infinity) are counted per tensor, not
clipped; NaN and infinity in a checkpoint are refused. `bench/bench_checkpoint.py` measures the
conversion against a plain copy.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from app.checkpoints.files import Mapped, Tensor
from app.errors import RequestError

try:
    from app.checkpoints.native import _fp16
except ImportError:  # not built (no C compiler at install): NumPy converts
    _fp16 = None  # type: ignore[assignment]  # the checker reads the module's stub, always there

CHUNK = 1 << 16  # elements converted at a time: 128-256 KiB of source, cache resident
DROP_BYTES = 16 << 20  # source bytes converted between two releases of their pages
_BF16_NORMAL_LO, _BF16_NORMAL_HI = 0x3880, 0x4780  # |x| in [2⁻¹⁴, 2¹⁶): fp16 normal
_BF16_INF = 0x7F80
_FP16_INF = 0x7C00
_SOURCE = {"F16": np.uint16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64}


@dataclass(frozen=True)
class Converted:
    values: np.ndarray  # fp16, the tensor's shape
    overflow: int  # values beyond the fp16 range (now ±inf)


def to_fp16(tensor: Tensor, mapped: Mapped) -> Converted:
    """The tensor as a new fp16 array, with the count of values that overflowed."""
    if tensor.dtype not in _SOURCE:
        raise RequestError(
            "checkpoint",
            f"tensor {tensor.name!r} is {tensor.dtype}; weights are read from F16, BF16, F32 or "
            "F64 tensors",
            title="Unsupported tensor",
        )
    out = np.empty(tensor.size, np.float16)
    source_type = _SOURCE[tensor.dtype]
    itemsize = np.dtype(source_type).itemsize
    mm = mapped.of(tensor)
    step = _converter(tensor.dtype)
    overflow, bad, released = 0, 0, tensor.offset
    scratch = np.empty(CHUNK, np.uint16)
    for start in range(0, tensor.size, CHUNK):
        stop = min(tensor.size, start + CHUNK)
        source = np.frombuffer(mm, source_type, stop - start, tensor.offset + start * itemsize)
        more, nonfinite = step(source, out[start:stop], scratch[: stop - start])
        overflow, bad = overflow + more, bad + nonfinite
        del source  # the view holds the mapping open
        done = tensor.offset + stop * itemsize
        if done - released >= DROP_BYTES or stop == tensor.size:
            released = _release(mm, released, done)
    if bad:
        raise RequestError(
            "checkpoint",
            f"tensor {tensor.name!r} holds {bad} NaN or infinite value(s)",
            title="Invalid tensor",
        )
    return Converted(out.reshape(tensor.shape), overflow)


def _release(mm: mmap.mmap, begin: int, end: int) -> int:
    """Drop the whole pages of [begin, end) from this process (they stay in the page cache)."""
    page = mmap.PAGESIZE
    first, last = -(-begin // page) * page, end // page * page
    if last > first and hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_DONTNEED, first, last - first)
    return last if last > first else begin


def compiled() -> bool:
    """Whether fp32 and bf16 convert through the compiled F16C path on this machine."""
    return _fp16 is not None and _fp16.available()


def _converter(dtype: str):
    if dtype in ("F32", "BF16") and compiled():
        return _compiled_f32 if dtype == "F32" else _compiled_bf16
    return {"F16": _from_fp16, "BF16": _from_bf16, "F32": _from_float, "F64": _from_float}[dtype]


def _compiled_f32(values: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> tuple[int, int]:
    return _compiled(0, values, out)


def _compiled_bf16(bits: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> tuple[int, int]:
    return _compiled(1, bits, out)


def _compiled(kind: int, source: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    counts = _fp16.convert(kind, source, out)
    assert counts is not None  # None only on a CPU without F16C, which compiled() ruled out
    return counts


def _from_fp16(bits: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> tuple[int, int]:
    out_bits = out.view(np.uint16)
    np.copyto(out_bits, bits)
    magnitude = np.bitwise_and(bits, 0x7FFF, out=scratch)
    bad = int(np.count_nonzero(magnitude >= _FP16_INF)) if magnitude.max() >= _FP16_INF else 0
    return 0, bad


def _from_float(values: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> tuple[int, int]:
    with np.errstate(over="ignore"):  # counted below
        np.copyto(out, values, casting="unsafe")
    hi, lo = float(values.max()), float(values.min())
    if np.isfinite(hi) and np.isfinite(lo) and max(hi, -lo) < 65520:
        return 0, 0
    finite = np.isfinite(values)
    return int(np.count_nonzero(finite & np.isinf(out))), int(values.size - finite.sum())


def _from_bf16(bits: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> tuple[int, int]:
    """bf16 sign | 8-bit exponent | 7-bit mantissa -> fp16 sign | 5 | 10, exactly, for every
    value of the fp16 normal range: ((magnitude − (112 << 7)) << 3) | sign."""
    out_bits = out.view(np.uint16)
    magnitude = np.bitwise_and(bits, 0x7FFF, out=scratch)
    np.subtract(magnitude, 112 << 7, out=out_bits)
    np.left_shift(out_bits, 3, out=out_bits)
    np.bitwise_or(out_bits, np.bitwise_and(bits, 0x8000), out=out_bits)
    if magnitude.min() >= _BF16_NORMAL_LO and magnitude.max() < _BF16_NORMAL_HI:
        return 0, 0
    odd = np.flatnonzero((magnitude < _BF16_NORMAL_LO) | (magnitude >= _BF16_NORMAL_HI))
    wide = (bits[odd].astype(np.uint32) << 16).view(np.float32)
    with np.errstate(over="ignore"):
        out_bits[odd] = wide.astype(np.float16).view(np.uint16)
    beyond = magnitude[odd]
    bad = int(np.count_nonzero(beyond >= _BF16_INF))
    return int(np.count_nonzero(beyond >= _BF16_NORMAL_HI)) - bad, bad
