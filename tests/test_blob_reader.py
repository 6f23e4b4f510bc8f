"""BlobReader: reads coremltools' files and ours, rejects malformed files with errors that name
the offset, and round-trips arbitrary writer plans (hypothesis)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from coremltools.libmilstoragepython import _BlobStorageWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.blob import (
    BlobDType,
    BlobEntry,
    BlobFormatError,
    BlobReader,
    BlobWriter,
    pack_subbyte,
    unpack_subbyte,
)


def _bytes(w: BlobWriter) -> bytes:
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


def _sample() -> tuple[bytes, list[int]]:
    w = BlobWriter()
    offs = [
        w.add(np.array([1.5, -2.0, 3.25], np.float16)),
        w.add(np.arange(10, dtype=np.float32)),
        w.add(np.array([-1, 2, -3], np.int8)),
    ]
    return _bytes(w), offs


def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_reads_coremltools_file(tmp_path: Path) -> None:
    path = tmp_path / "ct.bin"
    w = _BlobStorageWriter(str(path))
    f16 = np.array([1, 0, 0, 1], np.float16)
    offs = [
        w.write_fp16_data(f16.view(np.uint16)),
        w.write_float_data(np.linspace(0, 1, 33, dtype=np.float32)),
        w.write_int32_data(np.array([-5, 7], np.int32)),
        w.write_uint4_data(np.array([1, 2, 3, 4, 5], np.uint8)),
    ]
    del w
    r = BlobReader(path)
    assert r.count == 4
    assert [e.metadata_offset for e in r.check()] == offs
    np.testing.assert_array_equal(r.read(offs[0], BlobDType.FP16, (2, 2)), f16.reshape(2, 2))
    np.testing.assert_array_equal(r.read(offs[1]), np.linspace(0, 1, 33, dtype=np.float32))
    np.testing.assert_array_equal(r.read(offs[2], BlobDType.INT32), [-5, 7])
    assert r.entry(offs[3]) == BlobEntry(offs[3], BlobDType.UINT4, 3, offs[3] + 64, 4)
    np.testing.assert_array_equal(r.read_unpacked(offs[3]), [1, 2, 3, 4, 5])


@pytest.mark.parametrize("kind", ["path", "bytes", "bytearray", "memoryview"])
def test_sources_and_dtypes(tmp_path: Path, kind: str) -> None:
    data, offs = _sample()
    path = tmp_path / "w.bin"
    path.write_bytes(data)
    source = {
        "path": path,
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
    }
    with BlobReader(source[kind]) as r:
        a, b, c = (r.read(o) for o in offs)
        assert (a.dtype, b.dtype, c.dtype) == (np.float16, np.float32, np.int8)
        assert (
            a.tolist() == [1.5, -2.0, 3.25]
            and b.tolist() == list(range(10))
            and c.tolist() == [-1, 2, -3]
        )
        if kind in ("path", "bytes"):
            assert not b.flags.writeable
    assert b.sum() == 45  # arrays stay valid after close()


def test_raw_types_are_exposed_as_bits() -> None:
    w = BlobWriter()
    o_bf = w.add(np.array([0x3F80, 0xC000], np.uint16), BlobDType.BF16)
    o_f8 = w.add(np.array([0x38, 0x40], np.uint8), BlobDType.FP8E4M3FN)
    r = BlobReader(_bytes(w))
    assert r.read(o_bf).dtype == np.uint16 and r.read(o_bf).tolist() == [0x3F80, 0xC000]
    assert r.read(o_f8, BlobDType.FP8E4M3FN).tolist() == [0x38, 0x40]


def test_bad_sentinel_names_offset() -> None:
    data, offs = _sample()
    with pytest.raises(BlobFormatError, match=r"Invalid sentinel in blob_metadata at offset 128"):
        BlobReader(data).read(128)  # the data offset, not the metadata offset
    broken = _patch(data, offs[1], "<I", 0)
    r = BlobReader(broken)
    with pytest.raises(BlobFormatError, match=rf"Invalid sentinel .* offset {offs[1]}"):
        r.entry(offs[1])
    with pytest.raises(BlobFormatError, match="Invalid sentinel"):
        r.entries()
    assert r.read(offs[0]).tolist() == [1.5, -2.0, 3.25]  # other entries stay readable


def test_wrong_version() -> None:
    data, _ = _sample()
    for version in (0, 1, 3):
        with pytest.raises(BlobFormatError, match=rf"version {version} at offset 4"):
            BlobReader(_patch(data, 4, "<I", version))


def test_dtype_mismatch() -> None:
    data, offs = _sample()
    with pytest.raises(
        BlobFormatError, match=rf"data type does not match .* offset {offs[0]}.*FP16.*FP32"
    ):
        BlobReader(data).read(offs[0], BlobDType.FP32)


def test_unknown_dtype_code() -> None:
    data, offs = _sample()
    for code in (0, 18, 99):
        with pytest.raises(
            BlobFormatError, match=rf"unknown blob data type code {code} .* offset {offs[2]}"
        ):
            BlobReader(_patch(data, offs[2] + 4, "<I", code)).entry(offs[2])


def test_out_of_bounds_size_and_offset() -> None:
    data, offs = _sample()
    huge = _patch(data, offs[1] + 8, "<Q", 1 << 40)
    with pytest.raises(BlobFormatError, match=rf"out of bounds: blob_metadata at offset {offs[1]}"):
        BlobReader(huge).read(offs[1])
    moved = _patch(data, offs[2] + 16, "<Q", len(data))
    with pytest.raises(BlobFormatError, match=rf"out of bounds: blob_metadata at offset {offs[2]}"):
        BlobReader(moved).read(offs[2])
    with pytest.raises(BlobFormatError, match=r"offset 4096"):
        BlobReader(data).entry(4096)


def test_truncated_files(tmp_path: Path) -> None:
    data, offs = _sample()
    for cut in (0, 10, 63):
        path = tmp_path / f"cut{cut}.bin"
        path.write_bytes(data[:cut])
        with pytest.raises(BlobFormatError, match=rf"truncated file: {cut} bytes at offset 0"):
            BlobReader(path)
    # cut inside the last metadata block, inside its payload, and one byte short
    for cut in (offs[2] + 10, offs[2] + 64 + 1, len(data) - 1):
        r = BlobReader(data[:cut])
        with pytest.raises(BlobFormatError, match=rf"offset {offs[2]}"):
            r.read(offs[2])
        with pytest.raises(BlobFormatError, match=rf"offset {offs[2]}"):
            r.check()
        assert r.read(offs[1]).size == 10


def test_count_mismatches_only_matter_to_check() -> None:
    data, offs = _sample()
    low = BlobReader(_patch(data, 0, "<I", 2))  # Apple's reader ignores count; so does read()
    assert low.read(offs[2]).tolist() == [-1, 2, -3]
    assert len(low.entries()) == 2
    with pytest.raises(
        BlobFormatError, match=rf"count is 2 but another blob_metadata follows at offset {offs[2]}"
    ):
        low.check()
    high = BlobReader(_patch(data, 0, "<I", 4))
    with pytest.raises(BlobFormatError, match=r"count is 4 but the file ends after 3 entries"):
        high.check()


def test_tail_padding_tolerated_garbage_rejected() -> None:
    data, _ = _sample()
    assert len(BlobReader(data + bytes(-len(data) % 64)).check()) == 3
    with pytest.raises(BlobFormatError, match=rf"trailing bytes at offset {len(data)}"):
        BlobReader(data + b"\x01").check()
    with pytest.raises(BlobFormatError, match="trailing bytes"):
        BlobReader(data + bytes(128)).check()


def test_overlap_and_backward_offsets() -> None:
    data, offs = _sample()
    # the third entry's data offset points back into the second entry's payload
    overlap = _patch(data, offs[2] + 16, "<Q", offs[1] + 64)
    with pytest.raises(BlobFormatError, match="overlap"):
        BlobReader(overlap).check()
    # the last entry's data is declared inside its own metadata block
    inside = _patch(data, offs[2] + 16, "<Q", offs[2] + 8)
    with pytest.raises(BlobFormatError, match=rf"overlap: bytes \[{offs[2]}, {offs[2] + 64}\)"):
        BlobReader(inside).check()
    backwards = _patch(data, offs[1] + 16, "<Q", 64)
    with pytest.raises(BlobFormatError, match=rf"offset {offs[1]} points backwards"):
        BlobReader(backwards).entries()


def test_padding_and_element_size_checks() -> None:
    w = BlobWriter()
    o = w.add(np.arange(4, dtype=np.float32))
    data = _bytes(w)
    with pytest.raises(BlobFormatError, match=r"padding_size_in_bits 3 on byte-sized type FP32"):
        BlobReader(_patch(data, o + 24, "<Q", 3)).check()
    odd = _patch(data, o + 8, "<Q", 15)
    with pytest.raises(
        BlobFormatError, match=rf"offset {o}: 15 bytes is not a whole number of FP32"
    ):
        BlobReader(odd).read(o)
    with pytest.raises(BlobFormatError, match=r"holds 4 elements, shape \(3,\) needs 3"):
        BlobReader(data).read(o, shape=(3,))


SUBBYTE = [
    BlobDType.INT4,
    BlobDType.UINT1,
    BlobDType.UINT2,
    BlobDType.UINT3,
    BlobDType.UINT4,
    BlobDType.UINT6,
]
BYTE_TYPES = {
    BlobDType.FP16: np.float16,
    BlobDType.FP32: np.float32,
    BlobDType.UINT8: np.uint8,
    BlobDType.INT8: np.int8,
    BlobDType.INT16: np.int16,
    BlobDType.UINT16: np.uint16,
    BlobDType.INT32: np.int32,
    BlobDType.UINT32: np.uint32,
}


@st.composite
def _tensor(draw: st.DrawFn) -> tuple[BlobDType, np.ndarray, bool]:
    dtype = draw(st.sampled_from([*BYTE_TYPES, BlobDType.BF16, *SUBBYTE]))
    n = draw(st.integers(0, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if dtype in SUBBYTE:
        bits = {BlobDType.UINT1: 1, BlobDType.UINT2: 2, BlobDType.UINT3: 3, BlobDType.UINT6: 6}.get(
            dtype, 4
        )
        lo, hi = (-8, 7) if dtype == BlobDType.INT4 else (0, (1 << bits) - 1)
        return dtype, rng.integers(lo, hi, n, endpoint=True), False
    if dtype == BlobDType.BF16:
        return dtype, rng.integers(0, 1 << 16, n).astype(np.uint16), False
    raw = rng.integers(0, 256, n * np.dtype(BYTE_TYPES[dtype]).itemsize, dtype=np.uint8)
    arr = raw.view(BYTE_TYPES[dtype]).reshape(draw(st.sampled_from([(n,), (1, n)])))
    convert = dtype == BlobDType.FP16 and draw(st.booleans())
    if convert:  # a float32 source the writer has to round to fp16
        with np.errstate(invalid="ignore"):
            arr = arr.astype(np.float32)
    return dtype, arr, convert


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tensors=st.lists(_tensor(), min_size=0, max_size=12),
    repeats=st.lists(st.integers(0, 11), max_size=4),
    chunk=st.sampled_from([16, 100, 8 << 20]),
)
def test_roundtrip_property(
    tensors: list[tuple[BlobDType, np.ndarray, bool]], repeats: list[int], chunk: int
) -> None:
    w = BlobWriter(chunk_bytes=chunk)
    plan = tensors + [tensors[i] for i in repeats if i < len(tensors)]  # some exact repeats
    offsets = []
    for dtype, arr, convert in plan:
        if dtype in SUBBYTE:
            offsets.append(w.add_packed(pack_subbyte(arr, dtype), dtype, arr.size))
        elif convert or dtype == BlobDType.BF16:
            offsets.append(w.add(arr, dtype))
        else:
            offsets.append(w.add(arr))
    data = _bytes(w)
    assert len(data) == w.nbytes
    r = BlobReader(data)
    entries = r.check()
    assert entries == w.entries() and r.count == len(w) == len(entries)
    assert set(offsets) == {e.metadata_offset for e in entries}
    for (dtype, arr, _), off in zip(plan, offsets, strict=True):
        assert r.entry(off).dtype == dtype
        if dtype in SUBBYTE:
            np.testing.assert_array_equal(r.read_unpacked(off, dtype), arr)
            np.testing.assert_array_equal(unpack_subbyte(r.read(off), dtype, arr.size), arr)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                want = arr.astype(np.float16) if dtype == BlobDType.FP16 else arr
            got = r.read(off, dtype, arr.shape)
            assert got.shape == arr.shape
            assert got.tobytes() == np.ascontiguousarray(want).tobytes()
