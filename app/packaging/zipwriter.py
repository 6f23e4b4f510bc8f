"""Deterministic zips: sorted entries, fixed timestamps and modes, explicit directory entries.

Directory entries are written only for directories that would otherwise be lost (empty ones);
unzip tools create parents on their own. The same entries always give the same bytes, which is
what makes artifact digests and ETags honest. Large payloads are streamed into their entry
(stored, not deflated: fp16 weights barely compress and deflating 256 MiB would dominate the
build time).

The zip is written front to back without ever seeking: each entry's CRC and sizes follow its
data (a data descriptor, APPNOTE 4.3.9) instead of being patched into its header afterwards.
Every byte is final once written, so the artifact's digest is computed on the way out
(`DigestingWriter`) rather than in a second pass over the file.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from app.core.files import Sink

FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_DEFLATE_MIN = (
    4096  # smaller entries are stored: deflating a few hundred bytes costs more than it saves
)
# A streamed entry from this size on is written with zip64 sizes (APPNOTE 4.5.3): its size is
# known up front, and zipfile refuses to close a non-zip64 entry past 2 GiB - 1.
ZIP64_FROM = 1 << 31
_FILE_MODE = 0o100644 << 16
_DIR_MODE = (0o040755 << 16) | 0x10  # S_IFDIR|755, plus the MS-DOS directory flag


class ZipSink(Sink, Protocol):
    """Where a zip goes: a file, or a wrapper that hashes what passes (`DigestingWriter`) or
    drops it (a compile that wants only kernel.json). zipfile flushes it when it closes."""

    def flush(self) -> None: ...


@dataclass(frozen=True)
class Entry:
    path: str
    data: bytes | None = None
    stream: Callable[[Sink], int] | None = None  # writes exactly `size` bytes
    size: int = 0
    compress: bool = True


def _info(path: str, mode: int, compress: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(path, FIXED_TIME)
    info.external_attr = mode
    info.create_system = 3  # unix, so the modes above are honoured by unzip
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    return info


class _ForwardOnly:
    """`f` without seek: zipfile then writes data descriptors (see the module docstring)."""

    def __init__(self, f: ZipSink):
        self._f = f
        self._pos = 0

    def write(self, data: bytes | memoryview) -> int:
        n = memoryview(data).nbytes
        self._f.write(data)
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._f.flush()


class ZipStream:
    """A zip written entry by entry, in path order, front to back: for a caller that produces
    its entries one after another and must not hold them all (a model kit). The same entries
    give the same bytes as `write_zip`. Close it to write the central directory."""

    def __init__(self, f: ZipSink):
        # typeshed asks the file for a close(), which ZipFile never calls on a file it is handed
        self._zip = zipfile.ZipFile(_ForwardOnly(f), "w")  # type: ignore[call-overload]
        self._last = ""

    def add(self, entry: Entry) -> zipfile.ZipInfo:
        """Write one entry (its path after every path written so far); its ZipInfo, which says
        where its header is (`header_offset`) and what its data became."""
        self._next(entry.path)
        zf = self._zip
        if entry.data is not None:
            compress = entry.compress and len(entry.data) >= _DEFLATE_MIN
            zf.writestr(_info(entry.path, _FILE_MODE, compress), entry.data, compresslevel=6)
        else:
            assert entry.stream is not None
            info = _info(entry.path, _FILE_MODE, False)
            info.file_size = entry.size
            with zf.open(info, "w", force_zip64=entry.size >= ZIP64_FROM) as out:
                written = entry.stream(out)
            if written != entry.size:
                raise RuntimeError(f"{entry.path}: wrote {written} bytes, planned {entry.size}")
        return zf.filelist[-1]

    def add_dir(self, path: str) -> None:
        path = path.rstrip("/") + "/"
        self._next(path)
        self._zip.writestr(_info(path, _DIR_MODE, False), b"")

    def _next(self, path: str) -> None:
        if path <= self._last:
            raise ValueError(f"{path} comes after {self._last}: entries go in path order")
        self._last = path

    def close(self) -> None:
        self._zip.close()

    def abandon(self) -> None:
        """Stop here, the output being thrown away: nothing more is written to it (not even
        the central directory, when the object goes)."""
        self._zip.fp = None  # zipfile's own mark of a closed archive


def write_zip(f: ZipSink, entries: Iterable[Entry], empty_dirs: Iterable[str] = ()) -> None:
    """Write the zip to `f` from its current position, front to back."""
    dirs = {d.rstrip("/") + "/" for d in empty_dirs}
    items: list[tuple[str, Entry | None]] = [(d, None) for d in dirs]
    items += [(e.path, e) for e in entries]
    stream = ZipStream(f)
    try:
        for path, entry in sorted(items, key=lambda item: item[0]):
            if entry is None:
                stream.add_dir(path)
            else:
                stream.add(entry)
    except BaseException:
        stream.abandon()
        raise
    stream.close()
