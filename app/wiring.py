"""The composition root: every service built from the settings, once per app."""

from __future__ import annotations

from app.api.context import Services
from app.artifacts import Limits
from app.compile import select_compiler
from app.jobs.select import make_engine
from app.observability.metrics import Metrics
from app.service.compiled import CompiledService
from app.service.kernels import KernelService
from app.service.pool import BuildPool
from app.settings import Settings
from app.storage import artifact_store, blob_store


def build_services(settings: Settings) -> Services:
    metrics = Metrics()
    cache = artifact_store(
        settings,
        on_evict=lambda n: metrics.cache_evictions.inc(n),
        on_corrupt=metrics.cache_corrupt.inc,
    )
    metrics.cache_bytes.set(cache.total_bytes)
    blobs = blob_store(settings)
    pool = BuildPool(
        settings.workers,
        settings.max_backlog,
        settings.retry_after_seconds,
        on_change=metrics.builds_in_flight.set,
    )
    jobs = make_engine(
        settings,
        store=cache,
        blobs=blobs,
        # The embedded engine compiles with this machine's compiler; a farm's macOS workers
        # pick their own. Its builds and compiles run in the build pool, as every build here.
        compiler=None
        if settings.redis_url
        else select_compiler(settings.compiler, settings.mlmodelc_profile, pool.run),
        workdir=settings.data_dir / "work" / "embedded",
        run_build=pool.run,
        on_broker_error=lambda operation: metrics.broker_errors.labels(operation).inc(),
    )
    compiled = CompiledService(jobs, blobs, settings.sync_wait_s)
    kernels = KernelService(cache, pool, metrics, compiled.answer, Limits.of(settings))
    return Services(settings, metrics, cache, blobs, pool, kernels, jobs)
