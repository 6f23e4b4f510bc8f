"""OpenAPI response declarations shared by the routers (every error is problem+json)."""

from __future__ import annotations

from typing import Any

from app.service.problems import MEDIA_TYPE

_DESCRIPTIONS = {
    400: "Malformed body (JSON syntax, multipart framing)",
    401: "Missing or invalid API key (only when ANE_API_KEYS is set)",
    404: "Unknown op, blob or route",
    413: "Body or weight over the configured limit; the problem states the limit",
    415: "Unsupported Content-Type",
    422: "Validation failed; `field` names the input at fault",
    503: "Compiler unavailable, or the build backlog is full (see Retry-After)",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
