"""Request bodies read with limits: small JSON into memory, uploads streamed to files on disk.

Nothing here holds an upload in memory: file parts and raw bodies go chunk by chunk into a spool
file, and a body over its limit is refused (413, naming the limit) as soon as it is known to be
too big, from Content-Length when the client sends one, else when the excess bytes arrive.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from app.core.files import discard
from app.errors import BodyError, ErrorKind, FieldError
from app.settings import Settings
from app.uploads.hashing import StreamHasher

if TYPE_CHECKING:  # the package declares it for type checkers only
    from python_multipart.multipart import MultipartCallbacks


class Body(Protocol):
    """An incoming body: its headers (looked up by lower-case name) and its bytes as they come
    (an HTTP request is one)."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    def stream(self) -> AsyncIterator[bytes]: ...


def too_large(what: str, limit: int, part: str | None = None) -> FieldError:
    """A body, or one of its parts (named as the field at fault), over its limit."""
    message = f"{what} is larger than the limit of {limit} bytes"
    kind, title = ErrorKind.TOO_LARGE, "Payload too large"
    if part is None:
        return BodyError(message, kind=kind, title=title, limit=limit)
    return FieldError(part, message, kind=kind, title=title, limit=limit)


def malformed(detail: str, title: str = "Bad request") -> BodyError:
    return BodyError(detail, title=title)


def declared_length(request: Body) -> int | None:
    value = request.headers.get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        raise malformed("Content-Length is not a number") from None


async def read_small_body(request: Body, limit: int, what: str = "the JSON body") -> bytes:
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise too_large(what, limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(what, limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def spool_body(
    request: Body, dest: Path, limit: int, what: str, hasher: StreamHasher | None = None
) -> int:
    """Stream the raw body into `dest` (and `hasher`); returns its size. The caller removes
    `dest` on error."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise too_large(what, limit)
    size = 0
    with named(dest), open(dest, "wb") as f:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large(what, limit)
            f.write(chunk)
            if hasher is not None:
                hasher.feed(chunk)
    return size


@contextlib.contextmanager
def named(path: Path) -> Iterator[None]:
    """A failed write names no file (a full disk, say): name the spool file it was writing, so
    the error can say which directory ran out."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


@dataclass
class SpooledPart:
    name: str
    path: Path
    size: int = 0
    filename: str | None = None
    content_type: str | None = None
    hasher: StreamHasher | None = None  # the tensor's digest, computed while it arrived


@dataclass
class MultipartBody:
    fields: dict[str, bytes] = field(default_factory=dict)  # parts kept in memory (e.g. spec)
    files: dict[str, SpooledPart] = field(default_factory=dict)  # parts spooled to disk

    def cleanup(self) -> None:
        for part in self.files.values():
            if part.hasher is not None:
                part.hasher.close()
            discard(part.path)


@dataclass
class MultipartLimits:
    field_bytes: int  # each in-memory part
    file_bytes: int  # each spooled part
    body_bytes: int  # the whole body

    @classmethod
    def of(cls, settings: Settings) -> MultipartLimits:
        """A part held in memory is JSON (a request's spec); a file part is one tensor."""
        return cls(settings.max_json_bytes, settings.max_weight_bytes, settings.max_body_bytes)


class _Collector:
    """python-multipart callbacks that route each part to memory or a spool file."""

    def __init__(
        self, body: MultipartBody, limits: MultipartLimits, memory_parts: set[str], new_path
    ) -> None:
        self.body, self.limits, self.memory_parts, self.new_path = (
            body,
            limits,
            memory_parts,
            new_path,
        )
        self.headers: dict[str, str] = {}
        self.header_field = self.header_value = b""
        self.part: SpooledPart | None = None
        self.buffer: bytearray | None = None
        self.file: BinaryIO | None = None
        self.count = 0

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": lambda d, s, e: self._add("header_field", d[s:e]),
            "on_header_value": lambda d, s, e: self._add("header_value", d[s:e]),
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def _add(self, attr: str, data: bytes) -> None:
        setattr(self, attr, getattr(self, attr) + data)

    def on_part_begin(self) -> None:
        self.headers = {}
        self.count += 1
        if self.count > 64:
            raise malformed("more than 64 parts in the multipart body")

    def on_header_end(self) -> None:
        self.headers[self.header_field.decode("latin-1").lower()] = self.header_value.decode(
            "latin-1"
        )
        self.header_field = self.header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get("content-disposition", ""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            raise malformed("a multipart part has no name")
        if name in self.body.fields or name in self.body.files:
            raise FieldError(name, f"part {name!r} appears twice", title="Invalid request")
        filename = options.get(b"filename")
        part = SpooledPart(
            name,
            Path(),
            filename=filename.decode("utf-8", "replace") if filename is not None else None,
            content_type=self.headers.get("content-type"),
        )
        self.part = part
        if name in self.memory_parts:
            self.buffer = bytearray()
        else:
            part.path = self.new_path()
            part.hasher = StreamHasher(name)
            self.body.files[name] = part  # registered first, so cleanup finds it on error
            self.file = open(part.path, "wb")  # noqa: SIM115 - closed in on_part_end / close

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        assert self.part is not None
        self.part.size += end - start
        if self.buffer is not None:
            if self.part.size > self.limits.field_bytes:
                raise too_large(f"part {self.part.name!r}", self.limits.field_bytes, self.part.name)
            self.buffer += data[start:end]
        else:
            if self.part.size > self.limits.file_bytes:
                raise too_large(
                    f"weight part {self.part.name!r}", self.limits.file_bytes, self.part.name
                )
            assert self.file is not None and self.part.hasher is not None
            # A view, not a copy, of the immutable chunk (the hasher holds on to it).
            chunk = memoryview(data)[start:end] if isinstance(data, bytes) else data[start:end]
            with named(self.part.path):
                self.file.write(chunk)
            self.part.hasher.feed(chunk)

    def on_part_end(self) -> None:
        assert self.part is not None
        if self.buffer is not None:
            self.body.fields[self.part.name] = bytes(self.buffer)
            self.buffer = None
        self.close()
        self.part = None

    def close(self) -> None:
        if self.file is not None:
            file, self.file = self.file, None
            with named(Path(file.name)):
                file.close()  # flushes: a full disk may only show here

    def abandon(self) -> None:
        """Close after an error, which this must not hide (the file is removed anyway)."""
        with contextlib.suppress(OSError):
            self.close()


async def spool_multipart(
    request: Body, limits: MultipartLimits, memory_parts: set[str], new_path
) -> MultipartBody:
    """Parse a multipart/form-data body: parts named in `memory_parts` into memory, every other
    part into a file from `new_path()`. On any error the spooled files are removed."""
    _, params = parse_options_header(request.headers.get("content-type"))
    boundary = params.get(b"boundary")
    if not boundary:
        raise malformed("multipart/form-data without a boundary parameter")
    declared = declared_length(request)
    if declared is not None and declared > limits.body_bytes:
        raise too_large("the multipart body", limits.body_bytes)
    body = MultipartBody()
    collector = _Collector(body, limits, memory_parts, new_path)
    try:
        parser = MultipartParser(boundary, collector.callbacks())
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.body_bytes:
                raise too_large("the multipart body", limits.body_bytes)
            parser.write(chunk)
        parser.finalize()
        if collector.part is not None or parser.state != MultipartState.END:
            raise malformed(
                "the multipart body ends in the middle of a part", "Malformed multipart body"
            )
    except FormParserError as exc:
        collector.abandon()
        body.cleanup()
        raise malformed(f"malformed multipart body: {exc}", "Malformed multipart body") from None
    except BaseException:
        collector.abandon()
        body.cleanup()
        raise
    return body
