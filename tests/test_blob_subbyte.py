"""Sub-byte weights in weight.bin byte for byte as coremltools' _BlobStorageWriter writes them:
every sub-byte type, odd element counts (a part-used last byte, its padding bits recorded), mixed
with fp16 entries; both as BlobWriter entries and as the consts of a program (plan_weights, what
packaging writes)."""

import io
from pathlib import Path

import numpy as np
import pytest
from coremltools.libmilstoragepython import _BlobStorageReader, _BlobStorageWriter

from app.blob import BlobReader, BlobWriter, blob_dtype, pack_subbyte
from app.mil import Builder, DType
from app.packaging import plan_weights

SUBBYTE = [DType.INT4, DType.UINT1, DType.UINT2, DType.UINT3, DType.UINT4, DType.UINT6]
RNG = np.random.default_rng(7)


def values(dtype: DType, n: int) -> np.ndarray:
    if dtype is DType.FP16:
        return RNG.standard_normal(n).astype(np.float16)
    lo, hi = dtype.int_range
    return RNG.integers(lo, hi, n, endpoint=True).astype(dtype.numpy)


def coremltools_bytes(path: Path, items: list[tuple[DType, np.ndarray]]) -> tuple[bytes, list]:
    writer = _BlobStorageWriter(str(path))
    offsets = []
    for dtype, array in items:
        if dtype is DType.FP16:
            offsets.append(writer.write_fp16_data(array.view(np.uint16)))
        else:
            offsets.append(getattr(writer, f"write_{dtype.value}_data")(array))
    del writer  # it flushes when destroyed: at once, as its last reference goes (it is in no cycle)
    return path.read_bytes(), offsets


def mixed(dtype: DType, n: int) -> list[tuple[DType, np.ndarray]]:
    """fp16 (odd count), the sub-byte entry, fp16, the sub-byte entry again with other values."""
    return [
        (DType.FP16, values(DType.FP16, 17)),
        (dtype, values(dtype, n)),
        (DType.FP16, values(DType.FP16, 3 * n)),
        (dtype, values(dtype, n + 2)),
    ]


@pytest.mark.parametrize("n", [1, 3, 5, 7, 9, 13, 31, 101, 1001])
@pytest.mark.parametrize("dtype", SUBBYTE, ids=lambda d: d.value)
def test_blob_writer_matches_coremltools_mixed_with_fp16(tmp_path, dtype, n):
    items = mixed(dtype, n)
    want, want_offsets = coremltools_bytes(tmp_path / "ct.bin", items)
    writer = BlobWriter()
    offsets = [
        writer.add_packed(pack_subbyte(a, blob_dtype(d)), blob_dtype(d), a.size)
        if d.is_subbyte
        else writer.add(a)
        for d, a in items
    ]
    buf = io.BytesIO()
    writer.write(buf)
    assert buf.getvalue() == want
    assert offsets == want_offsets

    reader = BlobReader(want)
    for (d, a), off in zip(items, offsets, strict=True):
        entry = reader.entry(off)
        if d.is_subbyte:
            assert entry.padding_bits == (-a.size * d.bits) % 8
        np.testing.assert_array_equal(reader.read_values(off, blob_dtype(d)), a)


@pytest.mark.parametrize("n", [11, 13, 29, 101, 1001])
@pytest.mark.parametrize("dtype", SUBBYTE, ids=lambda d: d.value)
def test_program_consts_are_written_as_coremltools_writes_them(tmp_path, dtype, n):
    items = mixed(dtype, n)
    b = Builder("ios18")
    for i, (d, a) in enumerate(items):
        b.const(f"c{i}", a.reshape(1, -1), d)
    program = b.build([])
    writer, offsets = plan_weights(program)
    buf = io.BytesIO()
    writer.write(buf)
    want, want_offsets = coremltools_bytes(tmp_path / "ct.bin", items)
    assert buf.getvalue() == want
    assert [offsets[f"c{i}"] for i in range(len(items))] == want_offsets

    (tmp_path / "ours.bin").write_bytes(buf.getvalue())
    reader = _BlobStorageReader(str(tmp_path / "ours.bin"))
    for (d, a), off in zip(items, want_offsets, strict=True):
        name = d.value if d.is_subbyte else "fp16"
        got = getattr(reader, f"read_{name}_data")(off)
        np.testing.assert_array_equal(got, a.view(np.uint16) if d is DType.FP16 else a)


def test_small_subbyte_consts_stay_inline():
    """coremltools' should_use_weight_file: fewer than 10 elements stay in the program."""
    b = Builder("ios18")
    b.const("small", np.arange(9, dtype=np.uint8) % 8, DType.UINT3)
    b.const("large", np.arange(10, dtype=np.uint8) % 8, DType.UINT3)
    assert [op.name for op in b.build([]).blob_consts()] == ["large"]


@pytest.mark.parametrize(("dtype", "bad"), [(DType.UINT4, 16), (DType.INT4, -9), (DType.UINT1, 2)])
def test_a_subbyte_const_refuses_values_it_cannot_hold(dtype, bad):
    from app.mil import MILBuildError

    # refused as it is converted, naming the value and the dtype's range
    with pytest.raises(MILBuildError, match=rf"{bad} is outside {dtype.value} \["):
        Builder().const("c", np.array([0, bad]), dtype)


@pytest.mark.parametrize("dtype", SUBBYTE, ids=lambda d: d.value)
def test_values_packed_as_written_are_the_packed_values(dtype):
    """add_subbyte packs chunk by chunk as it writes (the writer's chunks of 64 bytes: 3- and
    6-bit values straddle them): the bytes add_packed writes, and each finds the other's equal
    entry."""
    n = 5000 + 3  # a part-used last byte
    v = values(dtype, n)
    code = blob_dtype(dtype)
    packed, lazy = BlobWriter(chunk_bytes=64), BlobWriter(chunk_bytes=64)
    packed.add_packed(pack_subbyte(v, code), code, n)
    lazy.add_subbyte(v, code)
    a, b = io.BytesIO(), io.BytesIO()
    packed.write(a)
    lazy.write(b)
    assert a.getvalue() == b.getvalue()
    both = BlobWriter(chunk_bytes=64)
    first = both.add_packed(pack_subbyte(v, code), code, n)
    assert both.add_subbyte(v, code) == first and len(both) == 1
    changed = v.copy()
    changed[-1] = v[-1] ^ 1 if dtype.int_range[0] == 0 else -1 - v[-1]
    assert both.add_subbyte(changed, code) != first and len(both) == 2
    # compared again, a source's first chunk is the one packed the first time and the rest is
    # packed on from where it stopped: the same answers, to the last value, against a source
    # compared for the first time
    again = BlobWriter(chunk_bytes=64)
    second = again.add_subbyte(changed, code)
    assert again.add_subbyte(v, code) != second and len(again) == 2  # packs both first chunks
    assert again.add_subbyte(changed.copy(), code) == second and len(again) == 2
    assert again.add_subbyte(v.copy(), code) != second and len(again) == 2
