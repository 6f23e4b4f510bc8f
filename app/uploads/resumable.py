"""Resumable uploads of whole files (a checkpoint's multi-GB safetensors, its config and
tokenizer files), in parts, for /v1/blobs/uploads (docs/uploads.md has the protocol).

1. start: the file's digest and size -> an upload id, the part size, and the bytes received so
   far (0; or the file is stored already: nothing to send).
2. parts: each at the offset the service reports as received, at most the part size. A part
   counts once all of its bytes arrived: a connection dropped mid-part leaves `received` where
   it was, and the client asks again (`state`) and resends from there.
3. finish: the bytes are hashed and checked against the declared digest, then stored by that
   digest: a safetensors file of several tensors as a checkpoint (its tensors usable as weights
   `sha256:<file>#<tensor>`), anything else as a plain file.

The upload's data and its state (a small JSON file) live on disk beside the blob store, so an
upload also survives a restart of the service. Uploads untouched for a day are removed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path

from app.digest import file_digest, hex_of, spelled
from app.errors import ErrorKind, RequestError
from app.files import atomic_file
from app.ids import random_hex
from app.uploads.blobstore import BlobStore
from app.uploads.spool import named, too_large

STALE_S = 86400.0
_STATE, _DATA = "state.json", "data"


class UnknownUpload(RequestError):
    """An upload id that was never started, finished already, or was removed as stale."""


@dataclass(frozen=True)
class UploadState:
    id: str
    digest: str
    bytes: int
    received: int
    part_bytes: int
    stored: bool = False  # finished (or the blob was there already): nothing more to send

    def to_json(self) -> dict:
        return asdict(self)


class Uploads:
    def __init__(self, blobs: BlobStore, part_bytes: int, max_bytes: int):
        self.blobs, self.part_bytes, self.max_bytes = blobs, part_bytes, max_bytes
        self.root = blobs.store.root / "uploads"  # the blob store's volume: finishing is a rename
        self.root.mkdir(parents=True, exist_ok=True)
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)  # one part at a time

    # -- the protocol --------------------------------------------------------------------------
    def start(self, digest: str, size: int) -> UploadState:
        """A new upload of a file of `size` bytes whose sha256 is `digest`. Blocking."""
        key = hex_of(digest)
        if key is None:
            raise RequestError("digest", f"{digest!r} is not `sha256:<64 hex>`")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RequestError("bytes", f"the file's size in bytes, not {size!r}")
        if size > self.max_bytes:
            raise too_large("the file", self.max_bytes, "bytes")
        if self.blobs.file(spelled(key)) is not None:
            return UploadState("", spelled(key), size, size, self.part_bytes, stored=True)
        self._remove_stale()
        state = UploadState(random_hex(), spelled(key), size, 0, self.part_bytes)
        folder = self.root / state.id
        folder.mkdir()
        (folder / _DATA).touch()
        self._save(state)
        return state

    def state(self, upload_id: str) -> UploadState:
        path = self._folder(upload_id) / _STATE
        try:
            return UploadState(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            raise UnknownUpload(
                "path.upload_id",
                f"no upload {upload_id!r} in progress (never "
                "started, finished, or removed after a day untouched); start "
                "again",
                kind=ErrorKind.NOT_FOUND,
                title="Unknown upload",
            ) from None

    async def write_part(
        self, upload_id: str, offset: int, length: int | None, chunks: AsyncIterator[bytes]
    ) -> UploadState:
        """Write one part at `offset` (which must be the bytes received so far); it counts once
        all of it arrived. The caller serialises parts of one upload."""
        state = self.state(upload_id)
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
            raise too_large("the part", room)
        path, written = self._folder(upload_id) / _DATA, 0
        with named(path), open(path, "r+b") as f:
            f.seek(offset)
            f.truncate()  # what a dropped part left past `received`
            async for chunk in chunks:
                written += len(chunk)
                if written > room:
                    raise too_large("the part", room)
                f.write(chunk)
        if length is not None and written != length:
            raise RequestError(
                "body",
                f"the part ended after {written} of its {length} bytes",
                title="Incomplete part",
            )
        state = UploadState(**{**asdict(state), "received": offset + written})
        self._save(state)
        return state

    def finish(self, upload_id: str) -> tuple[UploadState, dict]:
        """Check the digest of all the bytes and store the file. Blocking: one pass over it."""
        state = self.state(upload_id)
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

    def discard(self, upload_id: str) -> None:
        shutil.rmtree(self._folder(upload_id), ignore_errors=True)
        self.locks.pop(upload_id, None)

    # -- on disk -------------------------------------------------------------------------------
    def _folder(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise UnknownUpload(
                "path.upload_id",
                f"{upload_id!r} is not an upload id",
                kind=ErrorKind.NOT_FOUND,
                title="Unknown upload",
            )
        return self.root / upload_id

    def _save(self, state: UploadState) -> None:
        with atomic_file(self._folder(state.id) / _STATE) as f:
            f.write(json.dumps(state.to_json()).encode())

    def _remove_stale(self) -> None:
        now = time.time()
        for folder in self.root.iterdir():
            try:
                touched = max(p.stat().st_mtime for p in folder.iterdir())
            except (OSError, ValueError):
                touched = 0.0
            if now - touched > STALE_S:
                shutil.rmtree(folder, ignore_errors=True)
