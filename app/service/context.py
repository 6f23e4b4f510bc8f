"""Everything a request handler needs, built once per app and injected as a dependency."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from app.cache.store import ContentStore
from app.compile import select_compiler
from app.jobs import JobEngine, JobSettings, make_engine
from app.observability.metrics import Metrics
from app.service.kernels import KernelService
from app.service.pool import BuildPool
from app.settings import Settings
from app.uploads.blobstore import BlobStore


@dataclass
class Services:
    settings: Settings
    metrics: Metrics
    cache: ContentStore
    blobs: BlobStore
    pool: BuildPool
    kernels: KernelService
    jobs: JobEngine  # /v1/jobs: in this process, or arq + Redis when ANE_REDIS_URL is set

    @classmethod
    def create(
        cls,
        settings: Settings,
        job_settings: JobSettings | None = None,
    ) -> Services:
        metrics = Metrics()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        cache = ContentStore(
            settings.cache_dir,
            settings.cache_max_bytes,
            ".zip",
            on_evict=lambda n: metrics.cache_evictions.inc(n),
            on_corrupt=metrics.cache_corrupt.inc,
        )
        metrics.cache_bytes.set(cache.total_bytes)
        blobs = BlobStore(settings.blob_dir, settings.blob_max_bytes)
        pool = BuildPool(
            settings.workers,
            settings.max_backlog,
            settings.retry_after_seconds,
            on_change=metrics.builds_in_flight.set,
        )
        kernels = KernelService(cache, pool, metrics, settings.max_artifact_bytes)
        job_settings = job_settings or JobSettings()
        jobs = make_engine(
            job_settings,
            cache=cache,
            blobs=blobs,
            # The embedded engine compiles with this machine's compiler; a farm's macOS
            # workers pick their own.
            compiler=None if job_settings.redis_url else select_compiler(job_settings.compiler),
            workdir=settings.data_dir / "work" / "embedded",
        )
        return cls(settings, metrics, cache, blobs, pool, kernels, jobs)

    def ready(self) -> tuple[bool, str]:
        """Ready when the data directories are writable."""
        for path in (self.cache.tmp_dir, self.blobs.store.tmp_dir):
            if not os.access(path, os.W_OK):
                return False, f"{path} is not writable"
        return True, "ok"

    def spool_path(self) -> Path:
        return self.blobs.new_spool_path()


def services_of(request: Request) -> Services:
    return request.app.state.services


async def services(request: Request) -> Services:
    """The app's services, as a FastAPI dependency."""
    return services_of(request)
