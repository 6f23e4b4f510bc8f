"""The job broker (Redis) as the service meets it: one way to connect, which errors mean "the
broker is down" (not "this request is wrong"), how that reads to a user, and the delays between
reconnect attempts.

Clients connect lazily: building one touches no socket, so an API process starts, and serves
everything that needs no broker, while Redis is away. Every call is bounded by
ANE_BROKER_TIMEOUT_S (connect and answer), and a call that meets a dead pooled connection (the
broker restarted) reconnects once at once instead of failing the request that found it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from arq.connections import ArqRedis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.errors import ErrorKind, ServiceError
from app.settings import Settings

# Errors a healthy request cannot cause: the broker is unreachable, still loading its data,
# out of memory, a read-only replica, or unable to persist (MISCONF refuses every write).
_DOWN = (RedisConnectionError, RedisTimeoutError, OutOfMemoryError, ReadOnlyError)
_DOWN_REPLIES = ("MISCONF", "MASTERDOWN")


def is_broker_fault(exc: BaseException) -> bool:
    if isinstance(exc, _DOWN):
        return True
    if isinstance(exc, WatchError) and exc.__context__ is not None:
        # redis-py reports a connection lost during a WATCH (arq claims jobs under one) as a
        # WatchError raised while handling the connection error, not as the error itself
        return is_broker_fault(exc.__context__)
    return isinstance(exc, ResponseError) and str(exc).startswith(_DOWN_REPLIES)


def serialize(data: dict[str, Any]) -> bytes:
    # JSON, not arq's default pickle: a worker must not execute whatever Redis hands it.
    return json.dumps(data, default=str).encode()


def deserialize(raw: bytes) -> dict[str, Any]:
    return json.loads(raw)


def where(url: str) -> str:
    """The broker's address for messages and logs: scheme, host, port and database, never the
    password a URL may carry."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def broker_client(url: str, settings: Settings, queue: str | None = None) -> ArqRedis:
    """A client for the broker at `url` (no connection is made until the first call)."""
    client = ArqRedis.from_url(
        url,
        socket_connect_timeout=settings.broker_timeout_s,
        socket_timeout=settings.broker_timeout_s,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
    )
    client.job_serializer, client.job_deserializer = serialize, deserialize
    if queue is not None:
        client.default_queue_name = queue
    return client


def broker_unavailable(url: str, exc: BaseException, retry_after: float) -> ServiceError:
    """The 503 a request gets when it needs the broker and the broker does not answer."""
    return ServiceError(
        f"the job broker (Redis at {where(url)}) is unavailable: {exc}; jobs, batches and "
        f"workers answer again once it is back (retry in {retry_after:g} s). Kernel requests "
        "that need no compile are still served.",
        kind=ErrorKind.UNAVAILABLE,
        title="Job broker unavailable",
        retry_after=retry_after,
        cause="broker",
        broker=where(url),
    )


@dataclass
class Backoff:
    """Capped exponential delays with jitter: attempt n waits between half and all of
    min(cap, first * 2^n), so workers that lost the broker together do not return together."""

    first: float
    cap: float
    attempt: int = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.first * 2 ** min(self.attempt, 60))  # no float overflow
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
