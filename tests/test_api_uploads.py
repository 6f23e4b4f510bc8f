"""Resumable uploads of whole files (/v1/blobs/uploads) on a live server: a 288 MiB file
(generated, mostly sparse on the client's side) sent in 32 MiB parts, one part's connection
dropped halfway and the upload resumed from what the service reports; the digest checked at the
end; wrong offsets, early finishes and wrong digests refused by name. Nothing stays on disk."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
from checkpoint_support import write_safetensors
from conftest import uvicorn_server

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

PART = 32 << 20
SIZE = 9 * PART  # nine parts


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("uploads") / "data"
    with uvicorn_server(
        data_dir, upload_part_bytes=str(PART), max_upload_bytes=str(1 << 30)
    ) as url:
        yield url
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def big_file(tmp_path) -> Iterator[tuple[Path, str]]:
    """A sparse file with random bytes every 8 MiB (holes between), and its sha256."""
    path = tmp_path / "model.bin"
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        f.truncate(SIZE)
        for offset in range(0, SIZE, 8 << 20):
            f.seek(offset)
            f.write(rng.bytes(4096))
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)
    yield path, "sha256:" + digest.hexdigest()
    path.unlink()


def _part(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _drop_halfway(base: str, upload_id: str, offset: int, part: bytes) -> None:
    """PUT a part whose connection closes after half its bytes."""
    url = urlparse(base)
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(
            f"PUT /v1/blobs/uploads/{upload_id}?offset={offset} HTTP/1.1\r\n"
            f"Host: {url.netloc}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(part)}\r\n\r\n".encode()
        )
        sock.sendall(part[: len(part) // 2])


def test_an_interrupted_upload_resumes_and_the_digest_is_checked(base, big_file):
    path, digest = big_file
    with httpx.Client(base_url=base, timeout=120) as http:
        started = http.post("/v1/blobs/uploads", json={"digest": digest, "bytes": SIZE})
        assert started.status_code == 201, started.text
        upload = started.json()
        assert upload["received"] == 0 and upload["part_bytes"] == PART and not upload["stored"]
        uid = upload["id"]
        for offset in (0, PART, 2 * PART):
            sent = http.put(
                f"/v1/blobs/uploads/{uid}",
                params={"offset": offset},
                content=_part(path, offset, PART),
            )
            assert sent.status_code == 200 and sent.json()["received"] == offset + PART
        _drop_halfway(base, uid, 3 * PART, _part(path, 3 * PART, PART))
        # the service reports where to resume: the dropped part did not count
        state = http.get(f"/v1/blobs/uploads/{uid}").json()
        assert state["received"] == 3 * PART
        early = http.post(f"/v1/blobs/uploads/{uid}/finish")
        assert early.status_code == 409 and early.json()["field"] == "bytes"
        wrong = http.put(f"/v1/blobs/uploads/{uid}", params={"offset": 0}, content=b"x")
        assert wrong.status_code == 409 and wrong.json()["field"] == "query.offset"
        big = http.put(
            f"/v1/blobs/uploads/{uid}", params={"offset": 3 * PART}, content=b"\0" * (PART + 1)
        )
        assert big.status_code == 413
        offset = state["received"]
        while offset < SIZE:
            sent = http.put(
                f"/v1/blobs/uploads/{uid}",
                params={"offset": offset},
                content=_part(path, offset, PART),
            )
            assert sent.status_code == 200, sent.text
            offset = sent.json()["received"]
        done = http.post(f"/v1/blobs/uploads/{uid}/finish")
        assert done.status_code == 200, done.text
        assert done.json()["stored"] and done.json()["blob"] == {
            "digest": digest,
            "dtype": "file",
            "shape": [],
            "bytes": SIZE,
        }
        assert http.head(f"/v1/blobs/{digest}").status_code == 200
        assert http.get(f"/v1/blobs/uploads/{uid}").status_code == 404
        # the same file again: stored already, nothing to send
        again = http.post("/v1/blobs/uploads", json={"digest": digest, "bytes": SIZE})
        assert again.status_code == 200 and again.json()["stored"]


def _upload_whole(http: httpx.Client, body: bytes) -> httpx.Response:
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    uid = http.post("/v1/blobs/uploads", json={"digest": digest, "bytes": len(body)}).json()["id"]
    assert http.put(f"/v1/blobs/uploads/{uid}", params={"offset": 0}, content=body).is_success
    return http.post(f"/v1/blobs/uploads/{uid}/finish")


def test_bytes_that_only_begin_like_safetensors_are_a_plain_file(base):
    """One random file in 256 has `{` as its ninth byte; its first eight bytes, read as the
    header's length, then name far more than the file holds: it is stored as the file it is
    (the docs' upload example, on random bytes, was refused as an unreadable checkpoint)."""
    rng = np.random.default_rng(7)
    body = bytearray(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    body[7] = 0x80  # a length over 2**63
    body[8] = ord("{")
    with httpx.Client(base_url=base, timeout=60) as http:
        done = _upload_whole(http, bytes(body))
        assert done.status_code == 200, done.text
        assert done.json()["blob"]["dtype"] == "file"
        # a header that fits in the file but is not JSON is still a checkpoint's fault: 422
        broken = (10).to_bytes(8, "little") + b"{not json}" + b"\0" * 16
        refused = _upload_whole(http, broken)
        assert refused.status_code == 422 and refused.json()["field"] == "file", refused.text


def test_a_wrong_digest_is_refused_and_the_upload_discarded(base):
    body = b"{}"
    declared = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    with httpx.Client(base_url=base, timeout=60) as http:
        uid = http.post("/v1/blobs/uploads", json={"digest": declared, "bytes": 2}).json()["id"]
        assert (
            http.put(f"/v1/blobs/uploads/{uid}", params={"offset": 0}, content=body).status_code
            == 200
        )
        refused = http.post(f"/v1/blobs/uploads/{uid}/finish")
        assert refused.status_code == 422 and refused.json()["field"] == "digest"
        assert hashlib.sha256(body).hexdigest() in refused.json()["detail"]
        assert http.get(f"/v1/blobs/uploads/{uid}").status_code == 404
        bad = http.post("/v1/blobs/uploads", json={"digest": "sha256:12", "bytes": 2})
        assert bad.status_code == 422
        over = http.post("/v1/blobs/uploads", json={"digest": declared, "bytes": 2 << 30})
        assert over.status_code == 413 and over.json()["field"] == "bytes"


def test_a_safetensors_file_is_stored_as_a_checkpoint(base, tmp_path):
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"a": np.ones((2, 3), np.float32), "b": np.zeros(4, np.float32)})
    data = path.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with httpx.Client(base_url=base, timeout=60) as http:
        uid = http.post("/v1/blobs/uploads", json={"digest": digest, "bytes": len(data)}).json()[
            "id"
        ]
        http.put(f"/v1/blobs/uploads/{uid}", params={"offset": 0}, content=data)
        blob = http.post(f"/v1/blobs/uploads/{uid}/finish").json()["blob"]
        assert blob["dtype"] == "safetensors" and blob["tensors"] == 2
        assert json.loads(http.get(f"/v1/blobs/{digest}").text)["tensors"] == 2


def test_the_documented_upload_loop_runs(base, tmp_path, capsys):
    """docs/uploads.md's httpx loop, as written, on a file of three and a half parts (the docs
    tests run it on the page's own one-part file)."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "uploads.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    path = tmp_path / "shard.bin"
    path.write_bytes(np.random.default_rng(1).bytes(PART * 3 + PART // 2))
    code = code.replace('"http://localhost:8000"', repr(base)).replace(
        '"shard.bin"', repr(str(path))
    )
    assert repr(base) in code and repr(str(path)) in code, "the page's BASE and FILE lines moved"
    exec(compile(code, "docs/uploads.md", "exec"), {})
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"'digest': '{digest}'" in capsys.readouterr().out
    with httpx.Client(base_url=base) as http:
        assert http.get(f"/v1/blobs/{digest}").json()["bytes"] == path.stat().st_size


def test_the_client_uploads_a_file_once(base, tmp_path):
    """Client.upload_file: parts with progress; a file the service has is not sent again."""
    from app.client import Client

    path = tmp_path / "shard.bin"
    path.write_bytes(np.random.default_rng(2).bytes(2 * PART + 5))
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    seen = []
    with Client(base) as client:
        blob = client.upload_file(path, progress=lambda sent, total: seen.append((sent, total)))
        assert blob["digest"] == digest and blob["bytes"] == path.stat().st_size
        assert seen == [
            (PART, 2 * PART + 5),
            (2 * PART, 2 * PART + 5),
            (2 * PART + 5, 2 * PART + 5),
        ]
        seen.clear()
        assert client.upload_file(path, progress=lambda *a: seen.append(a))["digest"] == digest
        assert seen == []  # stored already: nothing sent
