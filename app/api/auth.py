"""Optional API keys: `Authorization: Bearer <key>` against ANE_API_KEYS (off when empty).

The key a request was let in with is its owner (`owner_of`): a resumable upload belongs to the
key that started it (app/uploads/resumable.py). The owner is the key's sha256, so no key is ever
written to disk; with keys off every request has the same owner, "".

One rule says which paths need a key, for the check and for the OpenAPI document alike: every
path under /v1/ except /v1/info; probes, metrics and the docs stay open. The check is an ASGI
middleware rather than a FastAPI dependency: resolving a dependency on every request cost more
than the check itself. The document declares the bearer scheme only when keys are configured
(see app/main.py), so the docs describe the service as it runs.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problems import Problem, problem_response

SCHEME = "bearer"
PROTECTED_PREFIX = "/v1/"
OPEN_PATHS = frozenset({"/v1/info"})
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ane-kernels"'}
_OWNER = "api_key_owner"  # where the middleware leaves the owner, in the request's scope state


def owner_of(scope: Scope) -> str:
    """Who is asking: the sha256 of the request's API key, or "" when keys are off."""
    return scope.get("state", {}).get(_OWNER, "")


def protected(path: str) -> bool:
    return path.startswith(PROTECTED_PREFIX) and path not in OPEN_PATHS


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: frozenset[str]):
        self.app = app
        self.keys = [key.encode() for key in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.keys and scope["type"] == "http" and protected(scope["path"]):
            problem = self._refusal(scope)
            if problem is not None:
                await problem_response(problem, instance=scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Problem | None:
        """Why the request may not pass, or None: then its owner is in its scope."""
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, token = header.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Problem(
                401,
                "this service needs an API key: send `Authorization: Bearer <key>`",
                title="Unauthorized",
                headers=_CHALLENGE,
            )
        given = token.strip().encode("latin-1")
        # Compare against every key in constant time, so timing says nothing about which is close.
        if not any(hmac.compare_digest(given, key) for key in self.keys):
            return Problem(
                401, "the API key is not valid", title="Unauthorized", headers=_CHALLENGE
            )
        scope.setdefault("state", {})[_OWNER] = hashlib.sha256(given).hexdigest()
        return None


def add_security(schema: dict) -> None:
    """Declare bearer auth on the protected operations of an OpenAPI document."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "one of the keys in ANE_API_KEYS",
    }
    for path, item in schema.get("paths", {}).items():
        if protected(path):
            for operation in item.values():
                operation["security"] = [{SCHEME: []}]
