"""Optional API keys: `Authorization: Bearer <key>` against ANE_API_KEYS (off when empty).

The OpenAPI document declares the bearer scheme only when keys are configured (see
app/main.py), so the docs describe the service as it runs.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from app.service.context import services_of
from app.service.problems import Problem

SCHEME = "bearer"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ane-kernels"'}


async def require_api_key(request: Request) -> None:
    # The services straight from the app, not as a sub-dependency: this runs on every request,
    # and each dependency FastAPI resolves costs as much as a small handler.
    keys = services_of(request).settings.api_key_set
    if not keys:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(
            401,
            "this service needs an API key: send `Authorization: Bearer <key>`",
            title="Unauthorized",
            headers=_CHALLENGE,
        )
    given = token.strip().encode()
    # Compare against every key in constant time, so timing says nothing about which is close.
    if not any(hmac.compare_digest(given, key.encode()) for key in keys):
        raise Problem(401, "the API key is not valid", title="Unauthorized", headers=_CHALLENGE)


def add_security(schema: dict, protected_prefix: str = "/v1/", open_paths=("/v1/info",)) -> None:
    """Declare bearer auth on the protected operations of an OpenAPI document."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "one of the keys in ANE_API_KEYS",
    }
    for path, item in schema.get("paths", {}).items():
        if path.startswith(protected_prefix) and path not in open_paths:
            for operation in item.values():
                operation["security"] = [{SCHEME: []}]
