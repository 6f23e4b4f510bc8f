"""Access middleware: request id, JSON access log line, per-route metrics, bytes in and out.

A plain ASGI middleware (not BaseHTTPMiddleware) so streamed zips pass through untouched and the
per-request overhead stays small. Handlers add labels through `scope["state"]` (`op`, `cache`).
Headers are never logged, so API keys cannot end up in the logs.
"""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.ids import random_hex
from app.observability.metrics import Metrics

log = logging.getLogger("ane.access")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class AccessMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        given = _header(scope, b"x-request-id")
        request_id = given if given and _REQUEST_ID.match(given) else random_hex()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        counts = {"in": 0, "out": 0, "status": 500}

        async def receive_counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                counts["in"] += len(message.get("body", b""))
            return message

        async def send_tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                counts["status"] = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            elif message["type"] == "http.response.body":
                counts["out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive_counted, send_tagged)
        finally:
            self._record(scope, state, counts, time.perf_counter() - start)

    def _record(self, scope: Scope, state: dict, counts: dict, elapsed: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        op = state.get("op", "")
        method = scope["method"]
        m = self.metrics
        m.requests.labels(template, method, str(counts["status"]), op).inc()
        m.latency.labels(template, method, op).observe(elapsed)
        m.bytes_in.labels(template).inc(counts["in"])
        m.bytes_out.labels(template).inc(counts["out"])
        if log.isEnabledFor(logging.INFO):
            client = scope.get("client")
            log.info(
                "request",
                extra={
                    "request_id": state["request_id"],
                    "method": method,
                    "path": scope["path"],
                    "route": template,
                    "status": counts["status"],
                    "duration_ms": round(elapsed * 1000, 3),
                    "bytes_in": counts["in"],
                    "bytes_out": counts["out"],
                    "op": op or None,
                    "cache": state.get("cache"),
                    "client": client[0] if client else None,
                },
            )
