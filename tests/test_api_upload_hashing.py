"""The digest computed while an upload streams in equals a pass over the finished file, for every
format and any chunking; where the stream cannot tell the range, it says so (None)."""

from __future__ import annotations

import numpy as np
import pytest
from http_support import npy_bytes, safetensors_bytes

from app.core.digest import tensor_digest
from app.tensors.headers import sniff, with_digest
from app.uploads.hashing import StreamHasher

W = np.arange(3 * 1000, dtype=np.float32).reshape(3, 1000) / 7
OTHER = np.ones((5,), np.float16)


def _stream(data: bytes, chunk: int, name: str | None = None):
    hasher = StreamHasher(name)
    for i in range(0, len(data), chunk):
        hasher.feed(data[i : i + chunk])
    return hasher.result()


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize(
    ("kind", "data", "name"),
    [
        ("npy", npy_bytes(W), None),
        ("safetensors-named", safetensors_bytes({"a": OTHER, "weight": W}), "weight"),
        ("safetensors-single", safetensors_bytes({"t": W}), None),
        ("raw", W.tobytes(), None),
    ],
)
def test_streamed_digest_matches_the_file(tmp_path, kind, data, name, chunk):
    path = tmp_path / "t.bin"
    path.write_bytes(data)
    tensor = sniff(path, "f", tensor_name=name, raw_dtype="float32", raw_shape=W.shape)
    streamed = _stream(data, chunk, name)
    assert streamed is not None
    assert streamed == (tensor.offset, tensor.nbytes, tensor_digest(W))
    assert with_digest(tensor, streamed).digest == with_digest(tensor).digest


def test_ambiguous_safetensors_falls_back():
    data = safetensors_bytes({"a": OTHER, "b": W})
    assert _stream(data, 4096, "weight") is None


def test_mismatched_range_is_not_trusted(tmp_path):
    path = tmp_path / "w.npy"
    path.write_bytes(npy_bytes(W))
    tensor = sniff(path, "f")
    wrong = (tensor.offset, tensor.nbytes - 4, "sha256:" + "0" * 64)
    assert with_digest(tensor, wrong).digest == tensor_digest(W)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=">f4").reshape(2, 3),
        np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)),
    ],
    ids=["big-endian", "fortran-order"],
)
def test_a_non_canonical_npy_is_rewritten_in_place(tmp_path, array):
    path = tmp_path / "w.npy"
    np.save(path, array)
    tensor = with_digest(sniff(path, "weights"))
    assert tensor.offset == 0 and tensor.dtype == np.dtype("<f4") and tensor.shape == (2, 3)
    assert np.fromfile(path, tensor.dtype).reshape(2, 3).tolist() == array.tolist()
    assert tensor.digest == tensor_digest(np.ascontiguousarray(array, "<f4"))
    assert [p.name for p in tmp_path.iterdir()] == ["w.npy"]  # no temp file left beside it
