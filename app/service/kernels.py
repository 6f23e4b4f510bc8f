"""The build pipeline behind POST /v1/kernels: cache lookup, single-flight, build, package,
store. (Compiled .mlmodelc artifacts are jobs: see app.routers.compiled and app.jobs.)

    request -> weights resolved (digests) -> cache key
            -> cache hit?  serve it
            -> else one build per key at a time, in the worker pool:
               build_kernel -> write_kernel_zip (temp file) -> sha256 -> publish
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cache.hot import HotArtifacts
from app.cache.keys import artifact_key
from app.cache.memo import Fingerprint, RequestMemo
from app.cache.singleflight import SingleFlight
from app.cache.store import ContentStore, StoredEntry
from app.observability.metrics import Metrics
from app.service.pool import BuildPool
from app.service.weights import ResolvedWeight
from app.service.worker import (
    BuildFailure,
    BuildRequest,
    BuildResult,
    PublishTo,
    build_artifact,
)

MEDIA_TYPE = "application/zip"
# Builds with more weight bytes than this take a worker to themselves (see BuildPool): they run
# long enough that waiting behind another in a batch would be felt, and a wake-up is nothing
# next to them.
ALONE_WEIGHT_BYTES = 4 << 20
_EXTENSIONS = {"mlpackage": "mlpackage.zip", "mil": "mil.zip", "mlmodelc": "mlmodelc.zip"}


@dataclass(frozen=True)
class KernelJob:
    op: str
    params: dict[str, Any]
    weights: dict[str, ResolvedWeight]
    fmt: str
    target: str
    name: str | None
    bypass_cache: bool = False
    verify: bool = False

    @property
    def model_name(self) -> str:
        return self.name or self.op

    def build_request(
        self, key: str, root: Path, suffix: str, dest: Path, max_artifact_bytes: int
    ) -> BuildRequest:
        """What a build worker needs to build this job and publish it under `key`."""
        meta = {
            "filename": f"{self.model_name}.{_EXTENSIONS[self.fmt]}",
            "op": self.op,
            "format": self.fmt,
        }
        return BuildRequest(
            self.op,
            self.params,
            self.weights,
            self.fmt,
            self.target,
            self.name,
            dest,
            max_artifact_bytes,
            PublishTo(root, suffix, key, meta),
            verify=self.verify,
        )

    def key(self) -> str:
        return artifact_key(
            op=self.op,
            params=self.params,
            weights={k: w.key_part for k, w in self.weights.items()},
            fmt=self.fmt,
            target=self.target,
            name=self.model_name,
            # Only when set, so the keys of artifacts without verification stay as they were.
            extra={"verify": True} if self.verify else None,
        )


@dataclass(frozen=True)
class Artifact:
    entry: StoredEntry
    built: bool  # this request's build produced it (X-Cache: miss)
    op: str
    content: bytes | None = None  # the zip, when a small one is already in memory

    @property
    def etag(self) -> str:
        return f'"{self.entry.digest}"'

    @property
    def filename(self) -> str:
        return str(self.entry.meta["filename"])


class KernelService:
    def __init__(
        self,
        cache: ContentStore,
        pool: BuildPool,
        metrics: Metrics,
        max_artifact_bytes: int = 1 << 62,
    ):
        self.cache, self.pool, self.metrics = cache, pool, metrics
        self.max_artifact_bytes = max_artifact_bytes
        self._flights: SingleFlight[tuple[StoredEntry, bool, bytes | None]] = SingleFlight()
        self.memo = RequestMemo()
        self.hot = HotArtifacts()

    def remembered(self, fingerprint: Fingerprint) -> Artifact | None:
        """The cached artifact of a request seen before with exactly these bytes, if its
        entry is present and verified; anything else goes the long way."""
        found = self.memo.get(fingerprint)
        if found is None:
            return None
        op, key = found
        entry = self.cache.lookup(key)
        if not isinstance(entry, StoredEntry):
            self.memo.forget(fingerprint)
            return None
        self.metrics.cache_hits.labels(op).inc()
        return Artifact(entry, built=False, op=op, content=self.hot.get(key, entry.signature))

    async def artifact(self, job: KernelJob, fingerprint: Fingerprint | None = None) -> Artifact:
        artifact = await self._artifact(job)
        if fingerprint is not None and not job.bypass_cache:
            self.memo.put(fingerprint, job.op, artifact.entry.key)
        return artifact

    async def _artifact(self, job: KernelJob) -> Artifact:
        # .mlmodelc requests are jobs (app.routers.compiled): the job engine owns the compilers.
        assert job.fmt != "mlmodelc", "compiled artifacts are built by the job engine"
        key = job.key()
        if not job.bypass_cache:
            found = self.cache.lookup(key)
            if isinstance(found, StoredEntry):
                self.metrics.cache_hits.labels(job.op).inc()
                content = self.hot.get(key, found.signature)
                return Artifact(found, built=False, op=job.op, content=content)

        async def flight() -> tuple[StoredEntry, bool, bytes | None]:
            # Looked up again: an earlier flight may have published it meanwhile.
            found = None if job.bypass_cache else self.cache.lookup(key)
            if isinstance(found, StoredEntry):
                return found, False, None
            if found:  # present but not verified yet: a pass over the file, off the loop
                entry = await asyncio.to_thread(self.cache.get, key)
                if entry is not None:
                    return entry, False, None
            entry, content = await self._build(job, key)
            return entry, True, content

        if job.bypass_cache:  # a forced rebuild does not join someone else's build
            entry, built, content = await flight()
            leader = True
        else:
            (entry, built, content), leader = await self._flights.do(key, flight)
        miss = built and leader
        (self.metrics.cache_misses if miss else self.metrics.cache_hits).labels(job.op).inc()
        return Artifact(entry, built=miss, op=job.op, content=content)

    async def _build(self, job: KernelJob, key: str) -> tuple[StoredEntry, bytes | None]:
        self.metrics.builds.labels(job.op).inc()
        request = job.build_request(
            key, self.cache.root, self.cache.suffix, self.cache.temp_path(), self.max_artifact_bytes
        )
        alone = sum(w.nbytes for w in job.weights.values()) > ALONE_WEIGHT_BYTES
        result = await self.pool.run(build_artifact, request, alone=alone)
        if isinstance(result, BuildFailure):
            raise result.problem()
        return self._adopt(job.op, key, result)

    def _adopt(self, op: str, key: str, result: BuildResult) -> tuple[StoredEntry, bytes | None]:
        """Index an artifact a worker built and published."""
        entry = self.cache.adopt(result.published)
        content = result.content
        if content is not None:
            self.hot.put(key, entry.signature, content)
        self.metrics.build_seconds.labels(op).observe(result.seconds)
        self.metrics.cache_bytes.set(self.cache.total_bytes)
        return entry, content

    def small_content(self, artifact: Artifact) -> bytes | None:
        """The bytes of a small artifact (read once, then kept in memory); None for a large
        one, which is streamed from its file."""
        if artifact.content is not None:
            return artifact.content
        entry = artifact.entry
        if entry.size > self.hot.max_item_bytes:
            return None
        with open(entry.path, "rb") as f:
            content = f.read()
        self.hot.put(entry.key, entry.signature, content)
        return content
