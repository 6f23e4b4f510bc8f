"""Errors as RFC 9457 problem documents (`application/problem+json`): the one place where a
failure becomes an HTTP status.

Code below the HTTP layer raises domain errors (`app.errors.FieldError`): `KIND_STATUS` maps
their kind to a status, and `from_field_error` builds the document. The HTTP layer's own
refusals (authentication, media types) raise `Problem` directly. The handlers installed by
`install_handlers` turn every error, FastAPI's own validation errors and unknown routes
included, into the same document shape.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from app.errors import ErrorKind, FieldError

MEDIA_TYPE = "application/problem+json"
# The client went away before its body arrived: nobody reads an answer, and it is not the
# service's failure. Logged and counted under nginx's status for it, "client closed request".
CLIENT_CLOSED = 499
log = logging.getLogger("ane.service")

KIND_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID: 422,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.MALFORMED: 400,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.CONFLICT: 409,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.STORAGE: 507,
    ErrorKind.INTERNAL: 500,
}
# Titles for errors that bring none of their own.
KIND_TITLE: dict[ErrorKind, str] = {ErrorKind.INVALID: "Invalid request"}


class Problem(Exception):
    """An error response: status, a short title and a detail a person can act on."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        field: str | None = None,
        errors: list[dict[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ):
        self.status = status
        self.title = title or HTTPStatus(status).phrase
        self.detail = detail
        self.field = field
        self.errors = errors
        self.headers = dict(headers or {})
        self.extra = extra
        super().__init__(detail)

    def body(self, instance: str | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if instance:
            doc["instance"] = instance
        if self.field is not None:
            doc["field"] = self.field
        if self.errors:
            doc["errors"] = self.errors
        doc.update(self.extra)
        return doc


def from_field_error(exc: FieldError) -> Problem:
    status = KIND_STATUS[exc.kind]
    headers = {"Retry-After": f"{exc.retry_after:g}"} if exc.retry_after is not None else None
    errors = [_err(exc.field, exc.message)] if exc.field is not None else None
    return Problem(
        status,
        exc.message,
        title=exc.title or KIND_TITLE.get(exc.kind),
        field=exc.field,
        errors=errors,
        headers=headers,
        **exc.extra,
    )


def problem_response(
    problem: Problem, request: Request | None = None, *, instance: str | None = None
) -> JSONResponse:
    instance = request.url.path if request is not None else instance
    return JSONResponse(
        problem.body(instance), problem.status, headers=problem.headers, media_type=MEDIA_TYPE
    )


def _err(field: str, message: str) -> dict[str, str]:
    return {"field": field, "message": message}


def field_path(loc: Iterable[Any], skip: int = 0) -> str:
    """('body', 'weights', 'weight') -> 'weights.weight'; list indices as [i]."""
    out = ""
    for part in list(loc)[skip:]:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def from_validation_errors(errors: Sequence[Mapping[str, Any]], *, skip: int = 0) -> Problem:
    """Pydantic errors -> one 422 listing every field; the first one is named in the detail, and
    so is any field sent that is not one (a misspelt name is why another is "required")."""
    items = [_err(field_path(e["loc"], skip) or "body", _message(e)) for e in errors]
    first = items[0]
    extras = [i["field"] for e, i in zip(errors, items, strict=True) if _extra(e)]
    missing = [i["field"] for e, i in zip(errors, items, strict=True) if e.get("type") == "missing"]
    got = ""
    if extras and first["field"] not in extras:
        got = "; got " + ", ".join(_guess(extra, missing) for extra in extras)
        got += ", not a field here" if len(extras) == 1 else ", not fields here"
    rest = len([i for i in items if i["field"] != first["field"] and i["field"] not in extras])
    more = f" (and {rest} more)" if rest else ""
    return Problem(
        422,
        f"{first['field']}: {first['message']}{got}{more}",
        title="Invalid request",
        field=first["field"],
        errors=items,
    )


def _extra(error: Mapping[str, Any]) -> bool:
    return error.get("type") == "extra_forbidden"


def _guess(extra: str, missing: list[str]) -> str:
    """`in_channel (did you mean in_channels?)` when a required field is spelt close to it."""
    close = difflib.get_close_matches(extra, missing, n=1, cutoff=0.75)
    return f"{extra} (did you mean {close[0]}?)" if close else extra


def _message(error: Mapping[str, Any]) -> str:
    msg = str(error.get("msg", "invalid"))
    if error.get("type") == "missing":
        return "field required"
    return msg


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc, request)

    @app.exception_handler(FieldError)
    async def _field(request: Request, exc: FieldError) -> JSONResponse:
        if exc.kind == ErrorKind.INTERNAL:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return problem_response(from_field_error(exc), request)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(from_validation_errors(list(exc.errors())), request)

    @app.exception_handler(ValidationError)
    async def _validation(request: Request, exc: ValidationError) -> JSONResponse:
        return problem_response(from_validation_errors(exc.errors()), request)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> Response:
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.url.path}; the API is listed at /docs"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return problem_response(Problem(exc.status_code, detail, headers=exc.headers), request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(
            Problem(500, "the service failed on this request; it has been logged"), request
        )
