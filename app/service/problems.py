"""Errors as RFC 9457 problem documents (`application/problem+json`).

Code anywhere below the routers raises `Problem` (or a core `KernelSpecError`, which becomes a
422 naming its field); the handlers installed by `install_handlers` turn every error, including
FastAPI's own validation errors and unknown routes, into the same document shape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from app.kernels import KernelSpecError

MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("ane.service")


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


def problem_response(
    problem: Problem, request: Request | None = None, *, instance: str | None = None
) -> JSONResponse:
    instance = request.url.path if request is not None else instance
    return JSONResponse(
        problem.body(instance), problem.status, headers=problem.headers, media_type=MEDIA_TYPE
    )


def from_spec_error(exc: KernelSpecError) -> Problem:
    status = 404 if exc.field == "op" else 422
    title = "Unknown op" if status == 404 else "Invalid kernel request"
    return Problem(
        status, exc.message, title=title, field=exc.field, errors=[_err(exc.field, exc.message)]
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


def from_validation_errors(errors: list[dict[str, Any]], *, skip: int = 0) -> Problem:
    """Pydantic errors -> one 422 listing every field; the first one is named in the detail."""
    items = [_err(field_path(e["loc"], skip) or "body", _message(e)) for e in errors]
    first = items[0]
    more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
    return Problem(
        422,
        f"{first['field']}: {first['message']}{more}",
        title="Invalid request",
        field=first["field"],
        errors=items,
    )


def _message(error: Mapping[str, Any]) -> str:
    msg = str(error.get("msg", "invalid"))
    if error.get("type") == "missing":
        return "field required"
    return msg


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc, request)

    @app.exception_handler(KernelSpecError)
    async def _spec(request: Request, exc: KernelSpecError) -> JSONResponse:
        return problem_response(from_spec_error(exc), request)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(from_validation_errors(list(exc.errors())), request)

    @app.exception_handler(ValidationError)
    async def _validation(request: Request, exc: ValidationError) -> JSONResponse:
        return problem_response(from_validation_errors(exc.errors()), request)

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
