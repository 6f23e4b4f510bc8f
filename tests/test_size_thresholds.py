"""Every size in the code where the path taken changes, crossed by at least one test:

| threshold | where | crossed by |
|---|---|---|
| 1 MiB: a kit's stored zip entry read back mapped | `app/packaging/zipread.MAPPED_BYTES` | tests/test_kits_real_size.py, tests/test_make_run.py (a 1.19 MB model.mil) |
| 1 MiB: an artifact kept in memory for cache hits | `app/cache/hot.SMALL_ARTIFACT_BYTES` | `test_an_artifact_over_the_hot_cache_size_is_served_from_its_file` |
| 8 MiB: a weight file written (and compared) in chunks | `app/blob/writer.DEFAULT_CHUNK_BYTES` | `test_weights_over_one_chunk_are_written_and_told_apart_whole` |
| 16 MiB: a zip built in memory, past it through a file | `app/artifacts._IN_MEMORY_BYTES` | `test_a_kernel_over_the_in_memory_size_zips_through_a_file_to_the_same_bytes` |
| 2 GiB: a streamed zip entry written zip64 | `app/packaging/zipwriter.ZIP64_FROM` | `test_a_zip64_entry_reads_back_everywhere` (the constant lowered) |
| 4 GiB: a pipe message to a build worker | `app/service/messages.MAX_MESSAGE_BYTES` | `test_a_message_over_the_limit_fails_in_the_caller_and_the_pool_serves_on` (lowered) |

The first four are crossed at their real size; the last two would take gigabytes of disk and
memory, so the test lowers the constant and checks the path on the other side of it.
"""

from __future__ import annotations

import asyncio
import io
import json
import struct
import zipfile
from tempfile import TemporaryFile
from unittest import mock

import numpy as np
import pytest

from app import artifacts
from app.blob import BlobReader
from app.blob.writer import DEFAULT_CHUNK_BYTES, BlobWriter
from app.cache.hot import SMALL_ARTIFACT_BYTES
from app.packaging import zipwriter
from app.packaging.zipread import CheckedZip
from app.packaging.zipwriter import Entry, write_zip
from app.request import KernelRequest
from app.service import messages

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not


def test_an_artifact_over_the_hot_cache_size_is_served_from_its_file(client):
    """SMALL_ARTIFACT_BYTES (1 MiB): a zip over it is not kept in memory; a cache hit streams it
    from the store's file, the same bytes and ETag as the build's answer."""
    side = 768  # a 768 x 768 fp16 weight: 1,179,648 bytes
    weight = np.random.default_rng(1).standard_normal((side, side)).astype(np.float32) * 0.01
    body = {"in_channels": side, "out_channels": side, "spatial": 1, "name": "over_hot_cache"}
    spec = (None, json.dumps(body), "application/json")
    buf = io.BytesIO()
    np.save(buf, weight)
    files = {"spec": spec, "weight": ("w.npy", buf.getvalue(), "application/octet-stream")}
    built = client.post("/v1/kernels/conv", files=files)
    assert built.status_code == 200, built.text
    assert len(built.content) > SMALL_ARTIFACT_BYTES
    hit = client.post("/v1/kernels/conv", files=files)
    assert hit.status_code == 200 and hit.headers["x-cache"] == "hit"
    assert hit.content == built.content and hit.headers["etag"] == built.headers["etag"]


def test_weights_over_one_chunk_are_written_and_told_apart_whole(tmp_path):
    """DEFAULT_CHUNK_BYTES (8 MiB): tensors larger than a chunk are written chunk by chunk and
    compared chunk by chunk for de-duplication: an equal copy is stored once, a copy differing
    in its last value (in the second chunk) is stored apart, and all read back exact."""
    count = DEFAULT_CHUNK_BYTES // 2 + 4096  # fp16 elements: one chunk and a bit
    first = np.random.default_rng(2).standard_normal(count).astype(np.float16)
    last_differs = first.copy()
    last_differs[-1] = -last_differs[-1] if last_differs[-1] else 1
    writer = BlobWriter()
    offsets = [writer.add(a) for a in (first, first.copy(), last_differs)]
    assert offsets[0] == offsets[1] != offsets[2]
    path = tmp_path / "weight.bin"
    writer.write_to_path(path)
    assert path.stat().st_size > 2 * DEFAULT_CHUNK_BYTES
    with BlobReader(path) as reader:
        assert np.array_equal(reader.read(offsets[0]), first)
        assert np.array_equal(reader.read(offsets[2]), last_differs)


def test_a_kernel_over_the_in_memory_size_zips_through_a_file_to_the_same_bytes(tmp_path):
    """_IN_MEMORY_BYTES (16 MiB): `kernel_zip` builds a zip of weights past it through a
    temporary file; its bytes are those `save` writes (and its weight.bin crosses 8 MiB
    chunks too)."""
    side = 2900  # 2900 x 2900 fp16: 16,820,000 bytes
    request = KernelRequest.create(
        "conv", {"in_channels": side, "out_channels": side, "spatial": 1}
    )
    prepared = artifacts.prepare(request, random_seed=0)
    assert artifacts.weight_bytes(prepared.build) >= artifacts._IN_MEMORY_BYTES
    through_a_file = mock.patch.object(artifacts.tempfile, "TemporaryFile", wraps=TemporaryFile)
    saved = tmp_path / "conv.zip"
    artifacts.save(prepared, saved)
    with through_a_file as temporary:
        assert artifacts.zip_bytes(prepared) == saved.read_bytes()
    assert temporary.called  # the path past the threshold (weights drawn from a seed included)


def test_a_zip64_entry_reads_back_everywhere(tmp_path, monkeypatch):
    """ZIP64_FROM (2 GiB), lowered to 1 MiB: a streamed entry from that size on is written with
    zip64 sizes; zipfile and the kits' own reader (which finds the data past the local header's
    extra field) read it back, while an entry below stays plain."""
    monkeypatch.setattr(zipwriter, "ZIP64_FROM", 1 << 20)
    big = np.random.default_rng(3).bytes((1 << 20) + 17)
    small = b"a small entry, stored as it is" * 10

    def stream(data: bytes):
        return lambda out: out.write(data) or len(data)

    path = tmp_path / "kit.zip"
    with open(path, "wb") as f:
        write_zip(
            f,
            [
                Entry("big.bin", stream=stream(big), size=len(big), compress=False),
                Entry("small.bin", stream=stream(small), size=len(small), compress=False),
            ],
        )
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        offsets = {i.filename: i.header_offset for i in zf.infolist()}
    data = path.read_bytes()

    def local_extra(name: str) -> bytes:  # APPNOTE 4.3.7: the extra field after the name
        name_len, extra_len = struct.unpack_from("<HH", data, offsets[name] + 26)
        start = offsets[name] + 30 + name_len
        return data[start : start + extra_len]

    assert local_extra("big.bin")[:2] == b"\x01\x00"  # the zip64 extended information field
    assert local_extra("small.bin") == b""
    files = CheckedZip(path)
    assert bytes(files["big.bin"]) == big and bytes(files["small.bin"]) == small


def _echo(value: bytes) -> int:
    return len(value)


def test_a_message_over_the_limit_fails_in_the_caller_and_the_pool_serves_on(monkeypatch):
    """MAX_MESSAGE_BYTES (4 GiB, the 4-byte length header's reach), lowered to 64 KiB: a build
    whose arguments pickle larger is refused in the caller, naming the size, with nothing sent;
    the worker it was meant for serves the next build."""
    from app.service.pool import BuildPool

    monkeypatch.setattr(messages, "MAX_MESSAGE_BYTES", 64 << 10)

    async def scenario() -> None:
        pool = BuildPool(1, 4, 2)
        try:
            await pool.warm()
            with pytest.raises(ValueError, match="too large for a pipe message"):
                await asyncio.wait_for(pool.run(_echo, b"x" * (80 << 10)), 30)
            assert await asyncio.wait_for(pool.run(_echo, b"x" * 1000), 30) == 1000
            assert pool.pending == 0
        finally:
            pool.shutdown()

    asyncio.run(scenario())
