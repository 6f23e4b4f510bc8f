"""Hostile users of the resumable uploads (/v1/blobs/uploads) and the blob store, on live
servers: an upload id predicted from request ids, another key's upload, a declaration that
would empty the artifact cache, quotas, a part that fills the disk, a sender that goes silent,
the same bytes as a tensor and as a file, a dropped part in the access log."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
from conftest import uvicorn_server
from faults_support import access_log, fill, log_path, small_filesystem
from hostile_support import hostile_server
from http_support import assert_problem, metric

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

MiB = 1 << 20
KEYS = {"alice": "key-of-alice", "bob": "key-of-bob"}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def as_key(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


# -- predicting Python's Mersenne Twister from its outputs ----------------------------------------


def _untemper(y: int) -> int:
    """The MT19937 state word that `y` was tempered from (the tempering is invertible)."""
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    t = y
    for _ in range(5):
        t = y ^ ((t << 7) & 0x9D2C5680)
    y = t & 0xFFFFFFFF
    t = y
    for _ in range(2):
        t = y ^ (t >> 11)
    return t & 0xFFFFFFFF


def predictor(outputs: list[int]) -> random.Random:
    """A generator in the state the server's is in after giving `outputs` (each a
    getrandbits(128): four 32-bit words, least significant first), 624 words of them."""
    words = [(value >> (32 * i)) & 0xFFFFFFFF for value in outputs for i in range(4)][-624:]
    assert len(words) == 624
    twin = random.Random()
    twin.setstate((3, (*[_untemper(w) for w in words], 624), None))
    return twin


# -- the servers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Two API keys, a small quota, uploads of up to 1 MiB, a silent sender dropped after 1 s."""
    data = tmp_path_factory.mktemp("hostile-uploads") / "data"
    settings = {
        "api_keys": ",".join(KEYS.values()),
        "max_upload_bytes": str(MiB),
        "max_uploads_in_progress": "3",
        "max_upload_reserved_bytes": str(2 * MiB),
        "upload_part_bytes": str(256 << 10),
        "upload_part_timeout_s": "1",
    }
    with hostile_server(data, **settings) as live:
        yield live


def start(server, name: str, data: bytes) -> httpx.Response:
    body = {"digest": sha(data), "bytes": len(data)}
    return server.client.post("/v1/blobs/uploads", json=body, headers=as_key(name))


def test_the_next_upload_id_cannot_be_predicted_from_request_ids(tmp_path):
    """Finding 1: 156 answers' X-Request-ID (from the process's Mersenne Twister) give its
    state. The prediction works (it names the upload's own request id), yet the upload id is
    none of the values the generator gives next: it comes from `secrets`."""
    with uvicorn_server(tmp_path / "data") as url, httpx.Client(base_url=url, timeout=60) as http:
        seen = [int(http.get("/healthz").headers["x-request-id"], 16) for _ in range(160)]
        twin = predictor(seen)
        data = b"predict me"
        answer = http.post("/v1/blobs/uploads", json={"digest": sha(data), "bytes": len(data)})
        assert answer.status_code == 201, answer.text
        upcoming = [f"{twin.getrandbits(128):032x}" for _ in range(64)]
        assert answer.headers["x-request-id"] == upcoming[0]  # the state was recovered
        upload_id = answer.json()["id"]
        assert upload_id not in upcoming
        assert len(upload_id) == 32 and int(upload_id, 16) >= 0


def test_an_upload_belongs_to_the_key_that_started_it(server):
    """Finding 1: another key can neither see, write into, finish nor delete it (404, as for an
    id never issued); its owner can, and DELETE removes it with its bytes."""
    data = b"alice's file" * 100
    upload = start(server, "alice", data)
    assert upload.status_code == 201, upload.text
    path = f"/v1/blobs/uploads/{upload.json()['id']}"
    bob = as_key("bob")
    client = server.client
    for answer in (
        client.get(path, headers=bob),
        client.put(path, params={"offset": 0}, content=data, headers=bob),
        client.post(f"{path}/finish", headers=bob),
        client.delete(path, headers=bob),
    ):
        problem = assert_problem(answer, 404, "path.upload_id")
        assert "another API key" in problem["detail"]
    assert client.get(path, headers=as_key("alice")).json()["received"] == 0
    sent = client.put(path, params={"offset": 0}, content=data[:100], headers=as_key("alice"))
    assert sent.status_code == 200 and sent.json()["received"] == 100
    folder = server.data_dir / "blobs" / "uploads" / upload.json()["id"]
    assert (folder / "data").stat().st_size == 100
    assert client.delete(path, headers=as_key("alice")).status_code == 204
    assert not folder.exists()
    assert_problem(client.get(path, headers=as_key("alice")), 404, "path.upload_id")
    assert_problem(client.delete(path, headers=as_key("alice")), 404, "path.upload_id")


def test_uploads_in_progress_are_held_to_a_quota_per_key(server):
    """Finding 4: a key's uploads in progress are counted (at most 3 here) and their declared
    bytes reserved (2 MiB here), each refusal naming its setting; another key has its own;
    DELETE gives the room back."""
    started = [start(server, "alice", bytes([i]) * 1000) for i in range(3)]
    assert all(s.status_code == 201 for s in started), [s.text for s in started]
    fourth = assert_problem(start(server, "alice", b"\x09" * 1000), 413, "bytes")
    assert fourth["setting"] == "ANE_MAX_UPLOADS_IN_PROGRESS" and fourth["limit"] == 3
    assert start(server, "bob", b"bob" * 100).status_code == 201  # a quota of its own
    for s in started:
        gone = server.client.delete(f"/v1/blobs/uploads/{s.json()['id']}", headers=as_key("alice"))
        assert gone.status_code == 204
    big = [start(server, "alice", bytes([i]) * MiB) for i in (1, 2)]
    assert all(s.status_code == 201 for s in big)
    over = assert_problem(start(server, "alice", b"\x03" * 1000), 413, "bytes")
    assert over["setting"] == "ANE_MAX_UPLOAD_RESERVED_BYTES" and over["reserved_bytes"] == 2 * MiB
    too_big = assert_problem(start(server, "alice", b"\x04" * (MiB + 1)), 413, "bytes")
    assert too_big["limit"] == MiB
    for s in big:
        server.client.delete(f"/v1/blobs/uploads/{s.json()['id']}", headers=as_key("alice"))


def test_an_oversized_part_is_refused_naming_the_body(server):
    """Finding 11: the 413 of a part over the part size names its field."""
    data = b"z" * MiB
    upload = start(server, "alice", data).json()
    path = f"/v1/blobs/uploads/{upload['id']}"
    declared = server.client.put(path, params={"offset": 0}, content=data, headers=as_key("alice"))
    assert assert_problem(declared, 413, "body")["limit"] == 256 << 10

    def stream():
        yield data[: 200 << 10]
        yield data[200 << 10 : 400 << 10]

    streamed = server.client.put(
        path, params={"offset": 0}, content=stream(), headers=as_key("alice")
    )
    assert_problem(streamed, 413, "body")
    folder = server.data_dir / "blobs" / "uploads" / upload["id"]
    assert (folder / "data").stat().st_size == 0  # the refused part's bytes are gone
    server.client.delete(path, headers=as_key("alice"))


def _silent_part(base: str, path: str, key: str, part: bytes) -> socket.socket:
    """A PUT that sends half its part, then nothing more, its connection left open."""
    url = urlparse(base)
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(
        f"PUT {path}?offset=0 HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {len(part)}\r\n\r\n".encode()
    )
    sock.sendall(part[: len(part) // 2])
    return sock


def test_a_silent_sender_does_not_keep_the_upload_from_resuming(server):
    """Finding 5: the part of a sender that vanished (its socket open, nothing more sent) is
    dropped after ANE_UPLOAD_PART_TIMEOUT_S (1 s here), its bytes cut off; the resumed part is
    answered while the old socket is still open."""
    data = b"r" * (200 << 10)
    upload = start(server, "alice", data).json()
    path = f"/v1/blobs/uploads/{upload['id']}"
    silent = _silent_part(server.url, path, KEYS["alice"], data)
    try:
        with httpx.Client(base_url=server.url, timeout=30, headers=as_key("alice")) as http:
            resumed = http.put(path, params={"offset": 0}, content=data)
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["received"] == len(data)
            done = http.post(f"{path}/finish")
            assert done.status_code == 200 and done.json()["blob"]["digest"] == sha(data)
        silent.settimeout(30)
        answer = silent.recv(4096).decode("latin-1")
        assert answer.startswith("HTTP/1.1 504") and "ANE_UPLOAD_PART_TIMEOUT_S" in answer
    finally:
        silent.close()


def test_a_dropped_part_is_not_a_server_error(server):
    """Finding 11: a connection closed halfway through a part is the client's doing: the access
    log and the metrics count it as 499, never as a 500."""
    data = b"d" * (200 << 10)
    upload = start(server, "alice", data).json()
    path = f"/v1/blobs/uploads/{upload['id']}"
    _silent_part(server.url, path, KEYS["alice"], data).close()

    def logged() -> list[dict]:
        return [d for d in access_log(log_path(server.data_dir, server.url)) if d["path"] == path]

    deadline = time.monotonic() + 30
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [d["status"] for d in logged()] == [499]
    counted = metric(
        server.client,
        "ane_requests_total",
        route="/v1/blobs/uploads/{upload_id}",
        method="PUT",
        status="500",
    )
    assert counted == 0
    log = log_path(server.data_dir, server.url).read_text()
    assert "unhandled error" not in log and "ClientDisconnect" not in log
    server.client.delete(path, headers=as_key("alice"))


def test_the_same_bytes_as_a_tensor_and_as_a_file_in_either_order(server):
    """Finding 2: bytes first posted as a raw uint8 tensor can still be uploaded as a file
    (it used to end in a 500 after every byte was sent), and a file's bytes can be posted as
    a tensor after it; each is described as what it is."""
    alice = as_key("alice")
    for order in ("tensor first", "file first"):
        data = json.dumps({"model_type": "llama", "order": order}).encode()
        digest = sha(data)

        def as_tensor(data: bytes = data) -> httpx.Response:
            return server.client.post(
                "/v1/blobs",
                params={"dtype": "uint8", "shape": str(len(data))},
                content=data,
                headers=alice,
            )

        def as_file(data: bytes = data) -> httpx.Response:
            upload = start(server, "alice", data).json()
            path = f"/v1/blobs/uploads/{upload['id']}"
            server.client.put(path, params={"offset": 0}, content=data, headers=alice)
            return server.client.post(f"{path}/finish", headers=alice)

        steps = (as_tensor, as_file) if order == "tensor first" else (as_file, as_tensor)
        first, second = (step() for step in steps)
        assert first.status_code in (200, 201), (order, first.text)
        assert second.status_code in (200, 201), (order, second.text)
        tensor = first if order == "tensor first" else second
        file = second if order == "tensor first" else first
        assert tensor.json()["dtype"] == "uint8" and tensor.json()["digest"] == digest
        assert file.json()["blob"]["dtype"] == "file" and file.json()["blob"]["digest"] == digest
        assert server.client.head(f"/v1/blobs/{digest}", headers=alice).status_code == 200
        # a model job finds the file (and then wants the rest of the checkpoint)
        job = server.client.post(
            "/v1/models", json={"files": {"config.json": digest}}, headers=alice
        )
        assert job.status_code == 422 and job.json()["field"] != "files.config.json", job.text
        again = start(server, "alice", data)
        assert again.status_code == 200 and again.json()["stored"]


def test_a_declaration_never_evicts_the_artifact_cache(tmp_path):
    """Finding 3: an upload start declaring more than the volume could hold is refused (507)
    with every cached artifact still cached: the declaration evicts nothing."""
    huge = str(1 << 50)
    limits = {"blob_max_bytes": huge, "max_upload_bytes": huge}
    with hostile_server(tmp_path / "data", **limits) as live:
        body = {
            "op": "conv",
            "in_channels": 2,
            "out_channels": 2,
            "spatial": 4,
            "weights": {"weight": [[1, 0], [0, 1]]},
            "format": "mil",
        }
        assert live.client.post("/v1/kernels/conv", json=body).status_code == 200
        data = b"never sent"
        declared = {"digest": sha(data), "bytes": 1 << 49}
        problem = assert_problem(live.client.post("/v1/blobs/uploads", json=declared), 507)
        assert problem["needed_bytes"] == 1 << 49 and problem["store"] == "blob store"
        assert metric(live.client, "ane_cache_evictions_total") == 0
        again = live.client.post("/v1/kernels/conv", json=body)
        assert again.status_code == 200 and again.headers["x-cache"] == "hit"


def test_a_part_that_fills_the_disk_leaves_no_bytes_behind(tmp_path):
    """Finding 4: a part streamed (no Content-Length) into a disk that fills answers 507, and
    its bytes are cut off again, so the volume is not left full; the upload resumes once there
    is room."""
    with (
        small_filesystem(tmp_path / "data", "8m") as data_dir,
        uvicorn_server(data_dir, min_free_bytes="0") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        data = np.random.default_rng(0).bytes(3 * MiB)
        upload = http.post("/v1/blobs/uploads", json={"digest": sha(data), "bytes": len(data)})
        assert upload.status_code == 201, upload.text
        path = f"/v1/blobs/uploads/{upload.json()['id']}"
        ballast = fill(data_dir / "ballast", leave=MiB)

        def stream():
            for start_at in range(0, len(data), 256 << 10):
                yield data[start_at : start_at + (256 << 10)]

        full = http.put(path, params={"offset": 0}, content=stream())
        assert assert_problem(full, 507)["store"] == "blob store"
        held = data_dir / "blobs" / "uploads" / upload.json()["id"] / "data"
        assert held.stat().st_size == 0 and held.stat().st_blocks == 0
        assert http.get(path).json()["received"] == 0
        ballast.unlink()
        resumed = http.put(path, params={"offset": 0}, content=data)
        assert resumed.status_code == 200, resumed.text
        assert http.post(f"{path}/finish").json()["blob"]["bytes"] == len(data)


def test_the_lock_table_keeps_no_entry_for_unknown_ids(tmp_path):
    """Finding 5: requests naming ids that do not exist (or ended) leave no lock behind; the
    app runs in process so its table can be looked at."""
    from app.main import create_app
    from app.settings import Settings

    app = create_app(Settings(data_dir=tmp_path / "data"))

    async def run() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            for i in range(50):
                missing = f"{i:032x}"
                answer = await http.put(
                    f"/v1/blobs/uploads/{missing}", params={"offset": 0}, content=b"x"
                )
                assert answer.status_code == 404
                assert (await http.post(f"/v1/blobs/uploads/{missing}/finish")).status_code == 404
            data = b"one real upload"
            upload = await http.post(
                "/v1/blobs/uploads", json={"digest": sha(data), "bytes": len(data)}
            )
            path = f"/v1/blobs/uploads/{upload.json()['id']}"
            await http.put(path, params={"offset": 0}, content=data)
            assert (await http.post(f"{path}/finish")).status_code == 200
        return len(app.state.services.uploads.locks)

    assert asyncio.run(run()) == 0


def test_an_upload_limit_over_the_blob_store_is_refused_at_start_up():
    """Finding 4: ANE_MAX_UPLOAD_BYTES (and ANE_MAX_WEIGHT_BYTES) above ANE_BLOB_MAX_BYTES would
    let one file evict every other blob: refused naming both; left at their defaults, they
    follow a smaller blob store down."""
    from pydantic import ValidationError

    from app.settings import Settings

    for name in ("max_upload_bytes", "max_weight_bytes"):
        with pytest.raises(ValidationError, match="ANE_BLOB_MAX_BYTES") as refused:
            Settings(blob_max_bytes=MiB, **{name: 2 * MiB})
        assert f"ANE_{name.upper()}" in str(refused.value)
    small = Settings(blob_max_bytes=MiB)
    assert small.max_upload_bytes == small.max_weight_bytes == MiB
    assert Settings().max_upload_bytes <= Settings().blob_max_bytes


def test_info_names_the_upload_limits(server):
    limits = server.client.get("/v1/info").json()["limits"]
    assert limits["max_uploads_in_progress"] == 3
    assert limits["max_upload_reserved_bytes"] == 2 * MiB
    assert limits["upload_part_timeout_s"] == 1


def test_the_docs_name_delete_and_ownership():
    page = " ".join(
        (Path(__file__).resolve().parents[1] / "docs" / "uploads.md").read_text().split()
    )
    assert "DELETE /v1/blobs/uploads/{id}" in page
    assert "ANE_API_KEYS" in page and "owned by the key that started it" in page
