"""The one checked reading of a zip a user hands in (a model kit read by `ane-kernels generate`,
`Kit.open` and the device-check job), before any member is trusted.

Checked when the zip is opened, from its central directory and each member's local header:
- the central directory parses (any fault of Python's zipfile parser is a refusal, not a
  traceback), and holds at most MAX_MEMBERS members;
- every name is a relative path of at most MAX_NAME_BYTES, without `..`, `.`, NUL, backslash or
  a leading `/`, and no name appears twice;
- every member is stored or deflated (APPNOTE 4.4.5: methods 0 and 8; LZMA, bzip2 and the rest
  are refused) and not encrypted; its local header is a local header, at its offset, naming the
  same file with the same method as the central directory;
- its bytes lie inside the file, before the central directory, and overlap no other member's
  (overlapping members are how a small zip inflates to terabytes); a stored member's two sizes
  agree.
Read:
- a deflated member (and a stored one under MAPPED_BYTES) into memory, inflated with a bound:
  never past `max_bytes` (MAX_INFLATED_BYTES unless the caller asks for less) nor past the size
  the central directory declares, checked while inflating, so a member that claims a kilobyte
  and inflates to gigabytes stops a byte past its claim; its CRC-32 checked;
- a large stored member (weights, tables) as a read-only memory map of its bytes in the file,
  so a many-GB kit is opened without reading it (its digest is its reader's to check).
Every refusal is a `ZipFault`, a RequestError naming the caller's field and the zip.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from app.errors import ErrorKind, RequestError

MAPPED_BYTES = 1 << 20  # stored members from this size on are read mapped, not copied
MAX_MEMBERS = 1 << 16
MAX_NAME_BYTES = 1024
# The most one member may inflate to in memory: a tokenizer.json of a 262,144-token vocabulary
# is 33 MB; 1.1 MB of deflate reaches 1.1 GB (its ratio tops out near 1,032:1).
MAX_INFLATED_BYTES = 256 << 20
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # APPNOTE 4.3.7, 30 bytes
_LOCAL_SIGNATURE = b"PK\x03\x04"
_ENCRYPTED, _UTF8 = 0x1, 0x800
_CHUNK = 1 << 20
# What Python's zipfile parser raises on a malformed central directory (its own BadZipFile,
# and the struct, index and decoding faults of fields it does not check).
_PARSE_FAULTS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ValueError,
    struct.error,
    EOFError,
    IndexError,
    KeyError,
    OverflowError,
    NotImplementedError,  # zipfile's answer to a compression method it does not have
    UnicodeDecodeError,
)


class ZipFault(RequestError):
    """A zip refused; its message names the zip and, where one is at fault, the member."""


class CheckedZip(Mapping[str, Any]):
    """A zip's files by name (directories left out), checked as the module says; each read
    when asked for: bytes, or a memoryview of a mapping for a large stored member."""

    def __init__(
        self,
        source: str | os.PathLike | BinaryIO,
        *,
        field: str = "zip",
        label: str | None = None,
        max_bytes: int = MAX_INFLATED_BYTES,
    ):
        """`source`: a path, or a real file open for reading (left open: its owner closes it)."""
        self.field, self.max_bytes = field, max_bytes
        self.label = label or str(getattr(source, "name", source))
        self._owned = isinstance(source, str | os.PathLike)
        try:
            self._file = open(source, "rb") if isinstance(source, str | os.PathLike) else source  # noqa: SIM115
        except OSError as exc:
            raise self._fault(f"cannot be read: {exc.strerror or exc}") from None
        try:
            self._size = os.fstat(self._file.fileno()).st_size
            self._infos = self._checked()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------
    def _fault(self, message: str, member: str | None = None, **extra: Any) -> ZipFault:
        where = f"{self.label}: {member}: " if member else f"{self.label}: "
        return ZipFault(self.field, where + message, title="Unreadable zip", **extra)

    def _checked(self) -> dict[str, zipfile.ZipInfo]:
        try:
            with zipfile.ZipFile(self._file) as zf:
                infos = zf.infolist()
                directory = getattr(zf, "start_dir", self._size)
        except _PARSE_FAULTS as exc:
            raise self._fault(f"not a readable zip: {exc}") from None
        if len(infos) > MAX_MEMBERS:
            raise self._fault(f"{len(infos)} members, over the limit of {MAX_MEMBERS}")
        seen: set[str] = set()
        self._starts: dict[str, int] = {}  # where each member's bytes begin
        for info in infos:
            self._check_name(info.filename, seen)
            self._check_member(info)
        self._check_layout(infos, directory)
        return {i.filename: i for i in infos if not i.filename.endswith("/")}

    def _check_name(self, name: str, seen: set[str]) -> None:
        parts = name.rstrip("/").split("/")
        if (
            not name
            or name.startswith("/")
            or "\\" in name
            or "\0" in name
            or any(p in ("", ".", "..") for p in parts)
            or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES
        ):
            raise self._fault(
                "not a relative path inside the zip (no `..`, `.`, empty parts, backslash, NUL "
                f"or leading `/`, at most {MAX_NAME_BYTES} bytes)",
                repr(name)[:80],
            )
        if name in seen:
            raise self._fault("appears twice", name)
        seen.add(name)

    def _check_member(self, info: zipfile.ZipInfo) -> None:
        name = info.filename
        if info.compress_type not in METHODS:
            raise self._fault(
                f"compression method {info.compress_type}; a zip read here holds "
                f"{' or '.join(METHODS.values())} members only",
                name,
            )
        if info.flag_bits & _ENCRYPTED:
            raise self._fault("encrypted", name)
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise self._fault(
                f"stored, yet {info.compress_size} bytes in the zip for {info.file_size}", name
            )
        if not 0 <= info.header_offset <= self._size - _LOCAL.size:
            raise self._fault(
                f"its local header at {info.header_offset} is outside the file of {self._size} "
                "bytes",
                name,
            )
        local = _LOCAL.unpack(os.pread(self._file.fileno(), _LOCAL.size, info.header_offset))
        signature, _, flags, method = local[:4]
        name_length, extra_length = local[9], local[10]
        raw = os.pread(self._file.fileno(), name_length, info.header_offset + _LOCAL.size)
        local_name = raw.decode("utf-8" if flags & _UTF8 else "cp437", "replace")
        if signature != _LOCAL_SIGNATURE or local_name != info.orig_filename:
            raise self._fault(
                "its local header does not match the central directory (signature or name)", name
            )
        if method != info.compress_type:
            raise self._fault(
                f"compression method {method} in its local header, {info.compress_type} in the "
                "central directory",
                name,
            )
        self._starts[name] = info.header_offset + _LOCAL.size + name_length + extra_length

    def _check_layout(self, infos: list[zipfile.ZipInfo], directory: int) -> None:
        """Every member's bytes inside the file, before the central directory, and apart."""
        end_of_previous, previous = 0, None
        for info in sorted(infos, key=lambda i: i.header_offset):
            start = self._starts[info.filename]
            end = start + info.compress_size
            if end > min(directory, self._size):
                raise self._fault(
                    f"its {info.compress_size} bytes at {start} run past the "
                    f"{'central directory' if directory < self._size else 'end of the file'}",
                    info.filename,
                )
            if info.header_offset < end_of_previous:
                raise self._fault(f"its bytes overlap those of {previous!r}", info.filename)
            end_of_previous, previous = end, info.filename

    # -- reading -------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        info = self._infos[name]
        if info.compress_type == zipfile.ZIP_STORED and info.file_size >= MAPPED_BYTES:
            return self._mapped(info)
        return self.read(name)

    def size(self, name: str) -> int:
        """The member's size as the central directory declares it (nothing is read)."""
        return self._infos[name].file_size

    def read(self, name: str, max_bytes: int | None = None) -> bytes:
        """The member's bytes in memory: at most `max_bytes` (default this zip's limit) and
        exactly its declared size, checked while inflating; its CRC-32 checked."""
        info = self._infos[name]
        limit = self.max_bytes if max_bytes is None else max_bytes
        if info.file_size > limit:
            raise self._fault(
                f"{info.file_size} bytes, over the limit of {limit} for a member read into memory",
                name,
                kind=ErrorKind.TOO_LARGE,
                limit=limit,
            )
        fd, start = self._file.fileno(), self._starts[name]
        if info.compress_type == zipfile.ZIP_STORED:
            data = os.pread(fd, info.file_size, start)
        else:
            data = self._inflate(info, fd, start)
        if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
            raise self._fault("its bytes do not match its size and CRC-32", name)
        return data

    def _inflate(self, info: zipfile.ZipInfo, fd: int, start: int) -> bytes:
        inflater, out, read = zlib.decompressobj(-zlib.MAX_WBITS), bytearray(), 0
        try:
            while read < info.compress_size and not inflater.eof:
                chunk = os.pread(fd, min(_CHUNK, info.compress_size - read), start + read)
                if not chunk:
                    break
                read += len(chunk)
                # never more than one byte past the declared size, whatever the chunk holds
                out += inflater.decompress(chunk, info.file_size + 1 - len(out))
                if len(out) > info.file_size:
                    raise self._fault(
                        f"inflates past the {info.file_size} bytes it declares", info.filename
                    )
        except zlib.error as exc:
            raise self._fault(f"not valid deflate data: {exc}", info.filename) from None
        return bytes(out)

    def _mapped(self, info: zipfile.ZipInfo) -> memoryview:
        start = self._starts[info.filename]
        base = start - start % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(
            self._file.fileno(), start - base + info.file_size, access=mmap.ACCESS_READ, offset=base
        )
        return memoryview(mapped)[start - base :]

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def close(self) -> None:
        if self._owned:
            self._file.close()

    def __del__(self) -> None:
        if getattr(self, "_owned", False) and hasattr(self, "_file"):
            self._file.close()
