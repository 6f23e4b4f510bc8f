"""A kit's zip written as its files are made, so that no more than one program's files are ever
held: each entry goes into the zip the moment it is added (in path order, as every deterministic
zip of the project has them), its sha256 taken from the bytes on their way out, for kit.json.

What is written can be read back before the zip is finished (the kit is verified before its
kit.json is written): a large stored entry (weights, tables) as a read-only memory map of its
bytes in the file, paged in only where it is read; any other as bytes.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from app.core.files import Sink
from app.packaging.zipread import MAPPED_BYTES
from app.packaging.zipwriter import Entry, ZipStream

_LOCAL_HEADER = 30  # bytes before a local header's name and extra field (APPNOTE 4.3.7)


class _Hashing:
    """The stream an entry writes into, passing the bytes on and hashing them."""

    def __init__(self, out: Sink, digest):
        self._out, self._digest = out, digest

    def write(self, data) -> int:
        self._digest.update(data)
        return self._out.write(data)


class KitZip:
    """The kit's zip on `f`, a real file opened for writing and reading, from its start."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self._zip = ZipStream(f)
        self._infos: dict[str, zipfile.ZipInfo] = {}
        self.digests: dict[str, str] = {}  # path -> sha256 of every file written

    def add(self, entry: Entry) -> None:
        digest = hashlib.sha256()
        if entry.data is not None:
            digest.update(entry.data)
            written = entry
        else:
            stream = entry.stream
            assert stream is not None
            written = Entry(
                entry.path,
                stream=lambda out: stream(_Hashing(out, digest)),
                size=entry.size,
                compress=entry.compress,
            )
        self._infos[entry.path] = self._zip.add(written)
        self.digests[entry.path] = digest.hexdigest()

    def close(self) -> None:
        self._zip.close()
        self._f.flush()

    def __enter__(self) -> KitZip:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        """Closed when the block succeeds; on an error abandoned (its file is discarded)."""
        if kind is None:
            self.close()
        else:
            self._zip.abandon()

    def files(self) -> Mapping[str, bytes]:
        """What is written so far, by path, read back when asked for."""
        return _Written(self)

    def read(self, path: str) -> bytes | memoryview:
        self._f.flush()
        return read_entry(self._f.fileno(), self._infos[path])


def read_entry(fd: int, info: zipfile.ZipInfo) -> bytes | memoryview:
    """One entry of the zip open as `fd`: a large stored one mapped, any other read."""
    header = os.pread(fd, _LOCAL_HEADER, info.header_offset)
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    start = info.header_offset + _LOCAL_HEADER + name_len + extra_len
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return zlib.decompress(os.pread(fd, info.compress_size, start), -15)
    if info.compress_type != zipfile.ZIP_STORED:
        raise zipfile.BadZipFile(f"{info.filename}: compression method {info.compress_type}")
    if info.file_size < MAPPED_BYTES:
        return os.pread(fd, info.file_size, start)
    base = start - start % mmap.ALLOCATIONGRANULARITY
    mapped = mmap.mmap(fd, start - base + info.file_size, access=mmap.ACCESS_READ, offset=base)
    return memoryview(mapped)[start - base :]


class _Written(Mapping[str, bytes]):
    def __init__(self, kit: KitZip):
        self._kit = kit

    def __getitem__(self, path: str) -> bytes:
        if path not in self._kit.digests:
            raise KeyError(path)
        # a large entry comes back as a memoryview of its mapping, which readers take as bytes
        return self._kit.read(path)  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._kit.digests))

    def __len__(self) -> int:
        return len(self._kit.digests)
