"""Typed errors built from the service's problem+json responses."""

from __future__ import annotations

from typing import Any

import httpx


class APIError(Exception):
    """An error answer from the service: status, title, detail and (for validation) the field."""

    def __init__(
        self, status: int, title: str, detail: str, field: str | None = None, body: Any = None
    ):
        self.status, self.title, self.detail, self.field, self.body = (
            status,
            title,
            detail,
            field,
            body,
        )
        where = f" [{field}]" if field else ""
        super().__init__(f"{status} {title}{where}: {detail}")


class InvalidRequest(APIError):
    """422: the request does not describe a buildable kernel."""


class NotFound(APIError):
    """404: unknown op, blob, job or route."""


class Unauthorized(APIError):
    """401: missing or wrong API key."""


class PayloadTooLarge(APIError):
    """413: the body or a weight is over the service's limit."""


class Unavailable(APIError):
    """503 (or 429) still refused after the retry budget: the service is busy or lacks a compiler."""


class ServerError(APIError):
    """5xx: the service failed; worth reporting."""


class InsufficientStorage(ServerError):
    """507: the service's disk is full (the body names the store and the bytes it needed)."""


_BY_STATUS = {
    401: Unauthorized,
    404: NotFound,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: Unavailable,
    503: Unavailable,
    507: InsufficientStorage,
}


def error_from_response(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "detail": response.text[:500]}
    status = response.status_code
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(
        status,
        str(body.get("title") or response.reason_phrase),
        str(body.get("detail") or ""),
        body.get("field"),
        body,
    )
