"""Domain errors: what went wrong with a request, which input is at fault, and what kind of
failure it is, as values any layer can raise.

A `FieldError` carries a `kind` (the sort of failure), the `field` path of the input at fault
("params.in_channels", "weights.bias", "inputs.x"), a message a person can act on, an optional
specific `title` and extra members for the answer (a limit, the formats available, a retry
delay). Two sorts of failure have no one field to name, and types of their own: a `BodyError`
(the body's bytes do not parse, or there are too many of them) and a `ServiceError` (the
service could not do it: busy, its storage or broker away, a worker lost). Both are FieldErrors
with field None, so whatever answers one answers them all. Nothing here knows HTTP: the edge
turns a kind into a status through one table (app/api/problems.py), the CLI prints
`error: <field>: <message>`.

Errors cross process boundaries (build workers, job records) as they are: `__reduce__` keeps
their keyword state, which default exception pickling would drop.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorKind(StrEnum):
    INVALID = "invalid"  # the request cannot be built as given
    NOT_FOUND = "not_found"  # it names something that does not exist (an op, a blob, a job)
    TOO_LARGE = "too_large"  # over a configured limit
    MALFORMED = "malformed"  # its bytes do not parse (JSON, multipart framing)
    UNAVAILABLE = "unavailable"  # not possible here now (busy, no compiler): retry later
    CONFLICT = "conflict"  # not in a state that allows it (a job that has not finished)
    TIMEOUT = "timeout"  # it ran out of time
    STORAGE = "storage"  # the service's own storage failed it (disk full, read-only)
    INTERNAL = "internal"  # the service failed (a crashed job that gave up): worth reporting


class FieldError(Exception):
    """A failed request; `field` names the input at fault."""

    kind: ErrorKind = ErrorKind.INVALID

    def __init__(
        self,
        field: str | None,
        message: str,
        *,
        kind: ErrorKind | None = None,
        title: str | None = None,
        retry_after: float | None = None,
        **extra: Any,
    ):
        self.field, self.message = field, message
        if kind is not None:
            self.kind = kind
        self.title, self.retry_after, self.extra = title, retry_after, extra
        super().__init__(f"{field}: {message}" if field else message)

    def __reduce__(self):
        return _rebuild, (
            type(self),
            self.field,
            self.message,
            self.kind,
            self.title,
            self.retry_after,
            self.extra,
        )


def _rebuild(cls, field, message, kind, title, retry_after, extra) -> FieldError:
    """Any FieldError type, whatever its own constructor takes."""
    exc = cls.__new__(cls)
    FieldError.__init__(
        exc, field, message, kind=kind, title=title, retry_after=retry_after, **extra
    )
    return exc


class RequestError(FieldError):
    """The request itself is wrong: bad params, weights, inputs, target or name."""


class BodyError(FieldError):
    """The request's body as a whole: its bytes do not parse (framing, a header) or there are
    more of them than a limit allows."""

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind = ErrorKind.MALFORMED,
        title: str | None = None,
        **extra: Any,
    ):
        super().__init__(None, message, kind=kind, title=title, **extra)


class ServiceError(FieldError):
    """The service could not do it, and no input is at fault: it is busy, its storage or its
    job broker is away, a worker or a job was lost, a compiler failed on its own."""

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        title: str | None = None,
        retry_after: float | None = None,
        **extra: Any,
    ):
        super().__init__(None, message, kind=kind, title=title, retry_after=retry_after, **extra)
