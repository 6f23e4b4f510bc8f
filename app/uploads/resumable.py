"""Resumable uploads of whole files (a checkpoint's multi-GB safetensors, its config and
tokenizer files), in parts, for /v1/blobs/uploads (docs/uploads.md has the protocol).

1. start: the file's digest and size -> an upload id, the part size, and the bytes received so
   far (0; or the file is stored already: nothing to send).
2. parts: each at the offset the service reports as received, at most the part size. A part
   counts once all of its bytes arrived: a part that fails (a dropped connection, a full disk, a
   sender silent for longer than the part timeout) leaves `received` where it was and its bytes
   are cut off again; the client asks again (`state`) and resends from there.
3. finish: the bytes are hashed and checked against the declared digest, then stored by that
   digest: a safetensors file of several tensors as a checkpoint (its tensors usable as weights
   `sha256:<file>#<tensor>`), anything else as a plain file.

An upload id is a capability: 128 bits from `secrets`, never from the process's PRNG (whose
state the request ids it draws would give away). An upload belongs to the API key that started
it: another key is told it does not exist, as for an id never issued. Each key may have
`max_count` uploads in progress declaring `max_reserved` bytes together; a start over either is
refused before anything is written, and so is one the volume could not hold even with every
cached artifact gone, counting the bytes the uploads in progress are still owed. A declaration
never evicts anything: the bytes of a part do, as they arrive (the API makes room for them).

The upload's data and its state (a small JSON file) live on disk beside the blob store, so an
upload also survives a restart of the service. Uploads untouched for a day are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from app.cache.faults import BLOB_STORE, store_full
from app.core.digest import file_digest, hex_of, spelled
from app.core.files import atomic_file
from app.errors import ErrorKind, RequestError
from app.uploads.blobstore import BlobStore
from app.uploads.spool import named, too_large

STALE_S = 86400.0
_STATE, _DATA = "state.json", "data"
ID_BYTES = 16  # 128 bits: as unguessable as a bearer token


class UnknownUpload(RequestError):
    """An upload id that was never started, finished already, was removed as stale or
    deleted, or belongs to another API key."""


@dataclass(frozen=True)
class UploadState:
    id: str
    digest: str
    bytes: int
    received: int
    part_bytes: int
    stored: bool = False  # finished (or the blob was there already): nothing more to send
    owner: str = ""  # the sha256 of the API key that started it ("" with keys off)

    def to_json(self) -> dict:
        """The upload as the API shows it (its owner is not shown)."""
        out = asdict(self)
        del out["owner"]
        return out


@dataclass(frozen=True)
class UploadLimits:
    part_bytes: int  # ANE_UPLOAD_PART_BYTES
    max_bytes: int  # ANE_MAX_UPLOAD_BYTES: one file
    max_count: int  # ANE_MAX_UPLOADS_IN_PROGRESS: per API key
    max_reserved: int  # ANE_MAX_UPLOAD_RESERVED_BYTES: per API key
    part_timeout_s: float  # ANE_UPLOAD_PART_TIMEOUT_S


class _Locks:
    """One lock per upload, held while a part, a finish or a delete runs; an entry lives only
    while some request uses it, so ids nobody is using take no room."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._held)

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._held.get(key, (None, 0))
        lock = lock or asyncio.Lock()
        self._held[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[key]
            if users == 1:
                del self._held[key]
            else:
                self._held[key] = (lock, users - 1)


class Uploads:
    def __init__(self, blobs: BlobStore, limits: UploadLimits, spare_bytes: Callable[[], int]):
        """`spare_bytes()`: what the volume could still take, free bytes plus what evicting
        every cached artifact on it would free."""
        self.blobs, self.limits, self.spare_bytes = blobs, limits, spare_bytes
        self.part_bytes = limits.part_bytes
        self.root = blobs.store.root / "uploads"  # the blob store's volume: finishing is a rename
        self.root.mkdir(parents=True, exist_ok=True)
        self.locks = _Locks()
        self._starting = threading.Lock()  # a quota is checked and taken in one step

    # -- the protocol --------------------------------------------------------------------------
    def start(self, digest: str, size: int, owner: str = "") -> UploadState:
        """A new upload of a file of `size` bytes whose sha256 is `digest`. Blocking."""
        key = hex_of(digest)
        if key is None:
            raise RequestError("digest", f"{digest!r} is not `sha256:<64 hex>`")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RequestError("bytes", f"the file's size in bytes, not {size!r}")
        if size > self.limits.max_bytes:
            raise too_large("the file", self.limits.max_bytes, "bytes")
        if self.blobs.file(spelled(key)) is not None:
            return UploadState("", spelled(key), size, size, self.part_bytes, stored=True)
        state = UploadState(
            secrets.token_hex(ID_BYTES), spelled(key), size, 0, self.part_bytes, owner=owner
        )
        with self._starting:
            self._reserve(size, owner)
            folder = self.root / state.id
            folder.mkdir()
            (folder / _DATA).touch()
            self._save(state)
        return state

    def _reserve(self, size: int, owner: str) -> None:
        """Refuse a start over the key's quota, or one the volume cannot hold (507, nothing
        evicted): the bytes the uploads in progress are still owed count as taken."""
        progress = self._in_progress()
        own = [s for s in progress if s.owner == owner]
        limits = self.limits
        if len(own) >= limits.max_count:
            raise RequestError(
                "bytes",
                f"{len(own)} uploads of this API key are in progress, the most "
                f"ANE_MAX_UPLOADS_IN_PROGRESS={limits.max_count} allows: finish or DELETE one",
                kind=ErrorKind.TOO_LARGE,
                title="Too many uploads in progress",
                limit=limits.max_count,
                setting="ANE_MAX_UPLOADS_IN_PROGRESS",
            )
        reserved = sum(s.bytes for s in own)
        if reserved + size > limits.max_reserved:
            raise RequestError(
                "bytes",
                f"{size} bytes more than the {reserved} this API key's uploads in progress "
                f"declared is over ANE_MAX_UPLOAD_RESERVED_BYTES={limits.max_reserved}: finish "
                "or DELETE one",
                kind=ErrorKind.TOO_LARGE,
                title="Upload quota exceeded",
                limit=limits.max_reserved,
                setting="ANE_MAX_UPLOAD_RESERVED_BYTES",
                reserved_bytes=reserved,
            )
        owed = sum(s.bytes - s.received for s in progress)
        spare = self.spare_bytes()
        if size + owed > spare:
            raise store_full(BLOB_STORE, self.root, size + owed, spare)

    def _in_progress(self) -> list[UploadState]:
        """Every upload in progress (any key's), the stale ones removed first."""
        self._remove_stale()
        found = []
        for folder in self.root.iterdir():
            with contextlib.suppress(OSError, ValueError, TypeError):
                found.append(UploadState(**json.loads((folder / _STATE).read_text())))
        return found

    def state(self, upload_id: str, owner: str = "") -> UploadState:
        path = self._folder(upload_id) / _STATE
        try:
            state = UploadState(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            state = None
        if state is None or not secrets.compare_digest(state.owner, owner):
            raise _unknown(upload_id)
        return state

    @contextlib.asynccontextmanager
    async def locked(self, upload_id: str, owner: str = "") -> AsyncIterator[None]:
        """Hold the upload's lock: one part, finish or delete at a time. Unknown ids (and
        another key's) are refused before any lock is made for them."""
        self.state(upload_id, owner)
        async with self.locks.hold(upload_id):
            yield

    async def write_part(
        self,
        upload_id: str,
        offset: int,
        length: int | None,
        chunks: AsyncIterator[bytes],
        owner: str = "",
    ) -> UploadState:
        """Write one part at `offset` (which must be the bytes received so far); it counts once
        all of it arrived, and on any failure its bytes are cut off again. The caller holds
        the upload's lock (`locked`)."""
        state = self.state(upload_id, owner)
        if offset != state.received:
            raise RequestError(
                "query.offset",
                f"the upload has {state.received} bytes; send the "
                f"part that starts there, not at {offset}",
                kind=ErrorKind.CONFLICT,
                title="Wrong offset",
                received=state.received,
            )
        room = min(self.part_bytes, state.bytes - offset)
        if length is not None and length > room:
            raise too_large("the part", room, "body")
        path, written = self._folder(upload_id) / _DATA, 0
        with named(path), open(path, "r+b") as f:
            f.seek(offset)
            f.truncate()  # what a part that failed without a word (a killed process) left
            try:
                async for chunk in self._arriving(chunks):
                    written += len(chunk)
                    if written > room:
                        raise too_large("the part", room, "body")
                    f.write(chunk)
                if length is not None and written != length:
                    raise RequestError(
                        "body",
                        f"the part ended after {written} of its {length} bytes",
                        title="Incomplete part",
                    )
                f.flush()  # a full disk shows here at the latest
            except BaseException:
                with contextlib.suppress(OSError):
                    f.truncate(offset)  # a failed part's bytes must not keep the volume full
                raise
        state = UploadState(**{**asdict(state), "received": offset + written})
        self._save(state)
        return state

    async def _arriving(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The part's chunks, each awaited at most the part timeout: a sender gone silent must
        not keep the upload's lock from the part that resumes it."""
        iterator, timeout = aiter(chunks), self.limits.part_timeout_s
        while True:
            try:
                async with asyncio.timeout(timeout):
                    chunk = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise RequestError(
                    "body",
                    f"no bytes of the part arrived for {timeout:g} s "
                    "(ANE_UPLOAD_PART_TIMEOUT_S): the part is dropped; resume from `received`",
                    kind=ErrorKind.TIMEOUT,
                    title="Part timed out",
                ) from None
            yield chunk

    def finish(self, upload_id: str, owner: str = "") -> tuple[UploadState, dict]:
        """Check the digest of all the bytes and store the file. Blocking: one pass over it."""
        state = self.state(upload_id, owner)
        if state.received != state.bytes:
            raise RequestError(
                "bytes",
                f"{state.received} of {state.bytes} bytes received; send "
                f"the rest from offset {state.received}",
                kind=ErrorKind.CONFLICT,
                title="Upload incomplete",
                received=state.received,
            )
        folder = self._folder(upload_id)
        data = folder / _DATA
        actual = file_digest(data)
        if actual != state.digest:
            shutil.rmtree(folder, ignore_errors=True)
            raise RequestError(
                "digest",
                f"the bytes received hash to {actual}, not the declared "
                f"{state.digest}; the upload is discarded: start again",
                title="Digest mismatch",
            )
        spool = self.blobs.new_spool_path()
        os.replace(data, spool)
        shutil.rmtree(folder, ignore_errors=True)
        info = self.blobs.put_file(spool, state.digest)
        return UploadState(**{**asdict(state), "stored": True}), info

    def delete(self, upload_id: str, owner: str = "") -> None:
        """Remove an upload in progress and its bytes (the caller holds its lock)."""
        self.state(upload_id, owner)
        shutil.rmtree(self._folder(upload_id), ignore_errors=True)

    # -- on disk -------------------------------------------------------------------------------
    def _folder(self, upload_id: str) -> Path:
        if not upload_id.isalnum() or not upload_id.isascii():
            raise _unknown(upload_id)
        return self.root / upload_id

    def _save(self, state: UploadState) -> None:
        with atomic_file(self._folder(state.id) / _STATE) as f:
            f.write(json.dumps(asdict(state)).encode())

    def _remove_stale(self) -> None:
        now = time.time()
        for folder in self.root.iterdir():
            try:  # the folder's own time too: an upload being started has no file yet
                touched = max(p.stat().st_mtime for p in (folder, *folder.iterdir()))
            except OSError:
                touched = 0.0
            if now - touched > STALE_S:
                shutil.rmtree(folder, ignore_errors=True)


def _unknown(upload_id: str) -> UnknownUpload:
    shown = upload_id if len(upload_id) <= 64 else upload_id[:64] + "..."
    return UnknownUpload(
        "path.upload_id",
        f"no upload {shown!r} in progress (never started, finished, deleted, removed after a "
        "day untouched, or started with another API key); start again",
        kind=ErrorKind.NOT_FOUND,
        title="Unknown upload",
    )
