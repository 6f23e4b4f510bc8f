"""Optional API keys: `Authorization: Bearer <key>` against ANE_API_KEYS (off when empty)."""

from __future__ import annotations

import hmac

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.service.context import Services, services
from app.service.problems import Problem

# auto_error=False: a missing header becomes our own 401 problem, not FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="required when ANE_API_KEYS is set")


def require_api_key(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    svc: Services = Depends(services),
) -> None:
    keys = svc.settings.api_key_set
    if not keys:
        return
    challenge = {"WWW-Authenticate": 'Bearer realm="ane-kernels"'}
    if credentials is None:
        raise Problem(
            401,
            "this service needs an API key: send `Authorization: Bearer <key>`",
            title="Unauthorized",
            headers=challenge,
        )
    given = credentials.credentials.encode()
    # Compare against every key in constant time, so timing says nothing about which is close.
    if not any(hmac.compare_digest(given, key.encode()) for key in keys):
        raise Problem(401, "the API key is not valid", title="Unauthorized", headers=challenge)
