"""BlobWriter: byte identity with coremltools' writer, Apple's layout vectors, fp16 rounding,
dedup, sub-byte padding, non-seekable destinations and atomic writes."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from coremltools.libmilstoragepython import _BlobStorageReader, _BlobStorageWriter

from app.blob import BlobDType, BlobReader, BlobWriter, blob_dtype_for, pack_subbyte

REPO = Path(__file__).resolve().parents[1]
SIZES = [1, 31, 32, 33, 64, 65, 1000]
RNG = np.random.default_rng(1234)

# dtype -> (coremltools method suffix, numpy dtype coremltools takes, how to draw values)
CT_TYPES = {
    BlobDType.FP16: ("fp16", np.uint16),
    BlobDType.FP32: ("float", np.float32),
    BlobDType.INT8: ("int8", np.int8),
    BlobDType.UINT8: ("uint8", np.uint8),
    BlobDType.INT16: ("int16", np.int16),
    BlobDType.UINT16: ("uint16", np.uint16),
    BlobDType.INT32: ("int32", np.int32),
    BlobDType.UINT32: ("uint32", np.uint32),
}
CT_SUBBYTE = {
    BlobDType.INT4: ("int4", np.int8, -8, 7),
    BlobDType.UINT1: ("uint1", np.uint8, 0, 1),
    BlobDType.UINT2: ("uint2", np.uint8, 0, 3),
    BlobDType.UINT3: ("uint3", np.uint8, 0, 7),
    BlobDType.UINT4: ("uint4", np.uint8, 0, 15),
    BlobDType.UINT6: ("uint6", np.uint8, 0, 63),
}


def _values(dtype: BlobDType, n: int) -> np.ndarray:
    """Random values in the numpy dtype we hand to BlobWriter.add (fp16 as float16)."""
    if dtype == BlobDType.FP16:
        return RNG.standard_normal(n).astype(np.float16)
    if dtype == BlobDType.FP32:
        return RNG.standard_normal(n).astype(np.float32)
    info = np.iinfo(CT_TYPES[dtype][1])
    return RNG.integers(info.min, info.max, n, endpoint=True, dtype=CT_TYPES[dtype][1])


def _ct_write(path: Path, items: list[tuple[BlobDType, np.ndarray]]) -> list[int]:
    w = _BlobStorageWriter(str(path))
    offsets = []
    for dtype, arr in items:
        if dtype in CT_SUBBYTE:
            offsets.append(getattr(w, f"write_{CT_SUBBYTE[dtype][0]}_data")(arr))
        else:
            ct_arr = arr.view(np.uint16) if dtype == BlobDType.FP16 else arr
            offsets.append(getattr(w, f"write_{CT_TYPES[dtype][0]}_data")(ct_arr))
    del w  # coremltools flushes the file when the writer is destroyed: here, its last reference
    return offsets


def _ours(items: list[tuple[BlobDType, np.ndarray]]) -> tuple[bytes, list[int]]:
    w = BlobWriter()
    offsets = []
    for dtype, arr in items:
        if dtype in CT_SUBBYTE:
            offsets.append(w.add_packed(pack_subbyte(arr, dtype), dtype, arr.size))
        else:
            offsets.append(w.add(arr))
    buf = io.BytesIO()
    assert w.write(buf) == w.nbytes == len(buf.getvalue())
    return buf.getvalue(), offsets


@pytest.mark.parametrize("n", [0, *SIZES])  # coremltools also writes empty entries
@pytest.mark.parametrize("dtype", list(CT_TYPES), ids=lambda d: d.name)
def test_single_entry_byte_identical_to_coremltools(
    tmp_path: Path, dtype: BlobDType, n: int
) -> None:
    items = [(dtype, _values(dtype, n))]
    ct_offsets = _ct_write(tmp_path / "ct.bin", items)
    ours, offsets = _ours(items)
    assert offsets == ct_offsets == [64]
    # coremltools does not pad after the last payload either, so even the length matches.
    assert ours == (tmp_path / "ct.bin").read_bytes()


@pytest.mark.parametrize("n", [1, 5, 7, 31, 33, 1000])
@pytest.mark.parametrize("dtype", list(CT_SUBBYTE), ids=lambda d: d.name)
def test_subbyte_byte_identical_to_coremltools(tmp_path: Path, dtype: BlobDType, n: int) -> None:
    _, np_dt, lo, hi = CT_SUBBYTE[dtype]
    items = [(dtype, RNG.integers(lo, hi, n, endpoint=True).astype(np_dt))]
    ct_offsets = _ct_write(tmp_path / "ct.bin", items)
    ours, offsets = _ours(items)
    assert offsets == ct_offsets
    assert ours == (tmp_path / "ct.bin").read_bytes()


def test_many_entries_byte_identical_and_readable_by_coremltools(tmp_path: Path) -> None:
    items = [(dt, _values(dt, n)) for n in SIZES for dt in CT_TYPES]
    items += [
        (dt, RNG.integers(lo, hi, 13, endpoint=True).astype(t))
        for dt, (_, t, lo, hi) in CT_SUBBYTE.items()
    ]
    ct_offsets = _ct_write(tmp_path / "ct.bin", items)
    ours, offsets = _ours(items)
    assert offsets == ct_offsets
    assert ours == (tmp_path / "ct.bin").read_bytes()

    (tmp_path / "ours.bin").write_bytes(ours)
    reader = _BlobStorageReader(str(tmp_path / "ours.bin"))
    for (dtype, arr), off in zip(items, offsets, strict=True):
        name = CT_SUBBYTE[dtype][0] if dtype in CT_SUBBYTE else CT_TYPES[dtype][0]
        got = getattr(reader, f"read_{name}_data")(off)
        want = arr.view(np.uint16) if dtype == BlobDType.FP16 else arr
        np.testing.assert_array_equal(got, want)


def _written(w: BlobWriter) -> bytes:
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


def test_apple_storage_integration_offsets() -> None:
    # StorageIntegrationTests.cpp: uint8x5, fp16x3, fp32x4, bf16x3, int16x3, uint16x3
    w = BlobWriter()
    offs = [
        w.add(np.arange(5, dtype=np.uint8)),
        w.add(np.array([1, 2, 3], np.float16)),
        w.add(np.array([1, 2, 3, 4], np.float32)),
        w.add(np.array([0x3F80, 0x4000, 0x4040], np.uint16), BlobDType.BF16),
        w.add(np.array([-1, 2, -3], np.int16)),
        w.add(np.array([1, 2, 3], np.uint16)),
    ]
    assert offs == [64, 192, 320, 448, 576, 704]
    assert [e.data_offset for e in w.entries()] == [128, 256, 384, 512, 640, 768]
    assert [e.dtype for e in BlobReader(_written(w)).check()] == [3, 1, 2, 5, 6, 7]


def test_payload_size_offsets_and_no_tail_padding() -> None:
    w = BlobWriter()
    offs = [w.add(np.full(n, i, np.uint8)) for i, n in enumerate([1, 5, 31, 32, 33, 64, 65, 1000])]
    assert offs == [64, 192, 320, 448, 576, 704, 832, 1024]
    assert w.nbytes == 2088 == len(_written(w))


def test_single_fp16_file_exact_bytes() -> None:
    w = BlobWriter()
    assert w.add(np.array([1, 0, 0, 1], np.float16)) == 64
    data = _written(w)
    expected = bytes.fromhex(
        "01000000 02000000"
        + "00" * 56
        + "efbeadde 01000000 0800000000000000 8000000000000000"
        + "00" * 40
        + "003c 0000 0000 003c"
    )
    assert data == expected and len(data) == 136
    assert hashlib.sha256(data).hexdigest() == (
        "db38f5221ecf0a98585ce1bc6cb53d8387d9c8d0ca52e6f5a646ea69ae3785ac"
    )


def test_coremltools_compiler_offsets() -> None:
    # test_weights.py: three fp32[500], two identical -> 64, 64, 2176
    w = BlobWriter()
    a = RNG.standard_normal(500).astype(np.float32)
    assert [w.add(a), w.add(a.copy()), w.add(a + 1)] == [64, 64, 2176]
    assert len(w) == 2
    # test_utils.py: fp16[8,1,5,5] at 64, fp16[5,6272] at 576, the next entry at 63360
    w = BlobWriter()
    assert w.add(np.zeros((8, 1, 5, 5), np.float16)) == 64
    assert w.add(np.ones((5, 6272), np.float16)) == 576
    assert w.add(np.ones(1, np.float16)) == 63360
    # a 65,536-byte payload pushes the second entry to 65664
    w = BlobWriter()
    assert [w.add(np.zeros(65536, np.uint8)), w.add(np.ones(3, np.uint8))] == [64, 65664]
    # two fp16 tensors (24 and 64 elements) make a 384-byte file
    w = BlobWriter()
    assert [w.add(np.ones((1, 2, 3, 4), np.float16)), w.add(np.ones(64, np.float16))] == [64, 192]
    assert w.nbytes == 384


def test_empty_writer_is_a_valid_header() -> None:
    w = BlobWriter()
    data = _written(w)
    assert data == bytes.fromhex("00000000 02000000") + bytes(56)
    assert w.nbytes == 64 and len(w) == 0
    assert BlobReader(data).check() == []


def _ref_f32_to_f16_bits(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Independent integer round-to-nearest-even fp32 -> fp16; returns (bits, is_nan)."""
    b = x.astype(np.float32).view(np.uint32).astype(np.int64)
    sign, exp, man = (b >> 16) & 0x8000, (b >> 23) & 0xFF, b & 0x7FFFFF
    mant = np.where(exp == 0, man, man | 0x800000)  # value = mant * 2**e2
    e2 = np.where(exp == 0, -149, exp - 150)
    unbiased = np.where(exp == 0, -127, exp - 127)
    quantum = np.maximum(unbiased, -14) - 10  # fp16 spacing exponent (subnormals: 2**-24)
    s = np.clip(quantum - e2, 1, 40)
    q = mant >> s
    rem, half = mant & ((1 << s) - 1), 1 << (s - 1)
    q = q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    bits = np.where(unbiased >= -14, ((unbiased + 15) << 10) + q - 1024, q)
    bits = np.where(exp == 255, 0x7C00, np.minimum(bits, 0x7C00))
    return (sign | bits).astype(np.uint16), (exp == 255) & (man != 0)


def _fp16_population() -> np.ndarray:
    all_h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(all_h[np.isfinite(all_h)].astype(np.float64))
    finite = np.unique(finite)
    mids = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)  # exact in fp32: 12 significant bits
    near = [np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))]
    edges = np.array(
        [
            65504,
            65519.996,
            65520,
            65520.004,
            65536,
            1e10,
            3.4e38,
            2.0**-24,
            2.0**-25,
            2.0**-26,
            3 * 2.0**-26,
            1e-45,
            6.1e-5,
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
        ],
        dtype=np.float32,
    )
    rand = np.random.default_rng(7).integers(0, 1 << 32, 1 << 20, dtype=np.uint32).view(np.float32)
    return np.concatenate([all_h.astype(np.float32), mids, *near, edges, -edges, rand])


def test_fp32_to_fp16_round_to_nearest_even() -> None:
    x = _fp16_population()
    want, nan = _ref_f32_to_f16_bits(x)
    with np.errstate(over="ignore", invalid="ignore"):
        numpy_bits = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(numpy_bits[~nan], want[~nan])  # the reference agrees with numpy

    with np.errstate(invalid="ignore"):  # widening signalling NaNs raises the invalid flag
        wide = x.astype(np.float64)
    for source in (x, wide):
        # an odd chunk size so conversion chunks straddle every kind of boundary
        w = BlobWriter(chunk_bytes=4096 + 24)
        off = w.add(source, BlobDType.FP16)
        got = BlobReader(_written(w)).read(off, BlobDType.FP16).view(np.uint16)
        assert np.array_equal(got[~nan], want[~nan])
        assert np.all((got[nan] & 0x7C00) == 0x7C00) and np.all((got[nan] & 0x3FF) != 0)
        assert np.array_equal(got[nan] & 0x8000, want[nan] & 0x8000)


def test_fp16_ties_and_subnormals_spot_values() -> None:
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 2.0**-25, 3 * 2.0**-25, 65520, -65519], np.float32)
    w = BlobWriter()
    off = w.add(x, BlobDType.FP16)
    got = BlobReader(_written(w)).read(off).view(np.uint16)
    # 1+2^-11 ties down to 1.0 (even), 1+3*2^-11 ties up, 2^-25 ties to 0, 3*2^-25 -> 2 * 2^-24
    assert got.tolist() == [0x3C00, 0x3C02, 0x0000, 0x0002, 0x7C00, 0xFBFF]


def test_dedup_rules() -> None:
    w = BlobWriter(chunk_bytes=256)
    base = RNG.standard_normal(10_000).astype(np.float32)
    o1 = w.add(base)
    assert w.add(base) == o1  # same object
    assert w.add(base.copy().reshape(100, 100)) == o1  # shape-independent
    tweaked = base.copy()
    tweaked[-1] = np.nextafter(tweaked[-1], np.float32(np.inf))  # differs only in the last chunk
    assert w.add(tweaked) != o1
    # same stored bytes via conversion: float32 -> FP16 dedups with the float16 array
    h = w.add(base, BlobDType.FP16)
    assert w.add(base.astype(np.float16)) == h != o1
    # same bits, different stored dtype: never merged
    bits = np.arange(8, dtype=np.uint16)
    assert len({w.add(bits), w.add(bits.view(np.int16)), w.add(bits, BlobDType.BF16)}) == 3
    # byte comparison, not value comparison: 0.0 and -0.0 are different weights
    assert w.add(np.zeros(4, np.float32)) != w.add(-np.zeros(4, np.float32))
    assert len(w) == 8
    assert BlobReader(_written(w)).check()[-1].metadata_offset == w.entries()[-1].metadata_offset


def test_subbyte_padding_bits() -> None:
    w = BlobWriter()
    o4 = w.add_packed(pack_subbyte(np.array([1, 2, 3, 4, 5]), BlobDType.UINT4), BlobDType.UINT4, 5)
    o2 = w.add_packed(b"\x39\x39", BlobDType.UINT2, 7)
    o8 = w.add_packed(b"\x21\x43", BlobDType.UINT4, 4)
    data = _written(w)
    for off, size, pad in [(o4, 3, 4), (o2, 2, 2), (o8, 2, 0)]:
        assert struct.unpack_from("<IIQQQ", data, off)[2:] == (size, off + 64, pad)
    assert data[o4 + 64 : o4 + 67] == b"\x21\x43\x05"
    np.testing.assert_array_equal(BlobReader(data).read_unpacked(o2), [1, 2, 3, 0, 1, 2, 3])
    with pytest.raises(ValueError, match="pack into 3 bytes"):
        w.add_packed(b"\x00\x00", BlobDType.UINT4, 5)
    with pytest.raises(TypeError, match="add_packed"):
        w.add(np.zeros(4, np.uint8), BlobDType.UINT4)
    with pytest.raises(TypeError, match="sub-byte"):
        w.add_packed(b"\x00", BlobDType.UINT8, 1)


def test_dtype_mapping_and_rejections() -> None:
    assert blob_dtype_for(np.float16) == BlobDType.FP16
    assert blob_dtype_for(np.dtype(">f4")) == BlobDType.FP32
    assert blob_dtype_for(np.zeros(1, np.uint32)) == BlobDType.UINT32
    for bad in (np.float64, np.int64, np.bool_, np.complex64, np.uint64):
        with pytest.raises(TypeError):
            blob_dtype_for(bad)
    w = BlobWriter()
    with pytest.raises(TypeError, match="FP16 or FP32"):
        w.add(np.zeros(3))
    with pytest.raises(TypeError, match="int64"):
        w.add(np.zeros(3, np.int64), BlobDType.INT32)
    with pytest.raises(TypeError, match="float16"):
        w.add(np.zeros(3, np.float16), BlobDType.BF16)
    assert len(w) == 0


def test_dedup_finds_equal_contents_whatever_their_layout_width_and_chunking() -> None:
    """Entries are keyed by their opening bytes too: a transposed view, a contiguous copy and a
    wider source of one fp16 weight begin alike at every chunk size; one differing only past
    the opening is compared in full and kept apart."""
    base = RNG.standard_normal((64, 96)).astype(np.float32)  # 12 KiB as fp16: past the opening
    for chunk in (16, 100, 4096, 8 << 20):
        w = BlobWriter(chunk_bytes=chunk)
        first = w.add(base.T, BlobDType.FP16)
        assert w.add(np.ascontiguousarray(base.T).astype(np.float16)) == first
        assert w.add(base.T.astype(np.float64), BlobDType.FP16) == first
        later = base.T.copy()
        later[-1, -1] += 1
        assert w.add(later, BlobDType.FP16) != first
        assert len(w) == 2


def test_non_contiguous_and_big_endian_sources_are_stored_c_order_little_endian() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    views = [
        a.transpose(2, 0, 1),
        a[:, ::2, 1:],
        np.asfortranarray(a),
        a.astype(">f4"),
        a.astype(">i2"),
    ]
    for chunk in (16, 1 << 20):
        w = BlobWriter(chunk_bytes=chunk)
        offs = [w.add(v) for v in views]
        r = BlobReader(_written(w))
        for v, off in zip(views, offs, strict=True):
            got = r.read(off, shape=v.shape)
            assert got.dtype.byteorder in "<=|" and np.array_equal(got, v)
            assert (
                r.read(off).tobytes()
                == np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")).tobytes()
            )


class _NoSeek(io.RawIOBase):
    """A write-only pipe-like destination that also takes at most 1000 bytes per call."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def seek(self, *args: object) -> int:
        raise io.UnsupportedOperation("seek")

    def tell(self) -> int:
        raise io.UnsupportedOperation("tell")

    def write(self, b) -> int:  # type: ignore[no-untyped-def]
        chunk = bytes(memoryview(b)[:1000])
        self.parts.append(chunk)
        return len(chunk)


def _mixed_writer() -> BlobWriter:
    w = BlobWriter(chunk_bytes=4096)
    w.add(RNG.standard_normal((64, 64)).astype(np.float32), BlobDType.FP16)
    w.add(np.arange(1001, dtype=np.int8))
    w.add_packed(b"\x12\x34\x05", BlobDType.UINT4, 5)
    return w


def test_write_to_non_seekable_streams() -> None:
    w = _mixed_writer()
    expected = _written(w)
    sink = _NoSeek()
    assert w.write(sink) == len(expected)
    assert b"".join(sink.parts) == expected

    zbuf = io.BytesIO()
    with (
        zipfile.ZipFile(zbuf, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("weights/weight.bin", "w") as entry,
    ):
        assert w.write(entry) == w.nbytes
    with zipfile.ZipFile(zbuf) as zf:
        assert zf.read("weights/weight.bin") == expected


def test_write_to_path_is_atomic_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "weight.bin"
    target.write_bytes(b"old")
    w = _mixed_writer()
    w.write_to_path(target)
    assert target.read_bytes() == _written(w)
    assert os.listdir(tmp_path) == ["weight.bin"]
    assert BlobReader(target).check()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_write_propagates_disk_full() -> None:
    with open("/dev/full", "wb", buffering=0) as f, pytest.raises(OSError):
        _mixed_writer().write(f)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
def test_write_to_path_failure_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    # A real mid-write failure: the kernel refuses to grow a file past RLIMIT_FSIZE (EFBIG).
    target = tmp_path / "weight.bin"
    target.write_bytes(b"previous weights")
    script = textwrap.dedent(
        """
        import resource, signal, sys
        import numpy as np
        from app.blob import BlobWriter
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        w = BlobWriter(chunk_bytes=1 << 16)
        w.add(np.arange(1 << 20, dtype=np.float32))
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 19, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            w.write_to_path(sys.argv[1])
        except OSError as exc:
            print("raised", exc.errno)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(target)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("raised"), out.stdout + out.stderr
    assert os.listdir(tmp_path) == ["weight.bin"]
    assert target.read_bytes() == b"previous weights"


def test_write_is_repeatable_and_chunk_size_independent() -> None:
    arrays = [RNG.standard_normal(n).astype(np.float32) for n in (1, 100, 5000)]
    outputs = set()
    for chunk in (16, 100, 4096, 8 << 20):
        w = BlobWriter(chunk_bytes=chunk)
        for a in arrays:
            w.add(a, BlobDType.FP16)
            w.add(a)
        outputs.add(_written(w))
        outputs.add(_written(w))
    assert len(outputs) == 1
