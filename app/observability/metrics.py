"""Prometheus metrics, one registry per app (tests may run several apps in one process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "ane_http_requests",
            "HTTP requests by route template, method, status and op",
            ["route", "method", "status", "op"],
            registry=r,
        )
        self.latency = Histogram(
            "ane_http_request_duration_seconds",
            "HTTP request latency (until the last body byte is sent)",
            ["route", "method", "op"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.bytes_in = Counter(
            "ane_http_request_bytes", "request body bytes received", ["route"], registry=r
        )
        self.bytes_out = Counter(
            "ane_http_response_bytes", "response body bytes sent", ["route"], registry=r
        )
        self.cache_hits = Counter(
            "ane_cache_hits",
            "kernel requests served from the cache or an in-flight build",
            ["op"],
            registry=r,
        )
        self.cache_misses = Counter(
            "ane_cache_misses", "kernel requests that built their artifact", ["op"], registry=r
        )
        self.builds = Counter("ane_builds", "kernel builds started", ["op"], registry=r)
        self.build_seconds = Histogram(
            "ane_build_seconds",
            "time to build, package and store one artifact",
            ["op"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.builds_in_flight = Gauge(
            "ane_builds_in_flight", "builds running or waiting for a worker", registry=r
        )
        self.rejected = Counter(
            "ane_builds_rejected", "builds refused because the backlog was full", registry=r
        )
        self.cache_bytes = Gauge("ane_cache_bytes", "bytes held by the artifact cache", registry=r)
        self.cache_evictions = Counter(
            "ane_cache_evictions", "artifacts evicted to stay under the size bound", registry=r
        )
        self.broker_errors = Counter(
            "ane_broker_errors",
            "job broker (Redis) calls that failed because it was unreachable, by operation",
            ["operation"],
            registry=r,
        )
        self.cache_corrupt = Counter(
            "ane_cache_corrupt", "cached artifacts whose digest no longer matched", registry=r
        )

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
