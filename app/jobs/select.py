"""Which job engine a process runs: arq on Redis when ANE_REDIS_URL is set, else embedded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.cache.store import ContentStore
from app.compile import Compiler
from app.compile.runner import RunBuild
from app.jobs.engine import JobEngine
from app.settings import Settings
from app.uploads.blobstore import BlobStore


def make_engine(
    settings: Settings,
    *,
    store: ContentStore,
    blobs: BlobStore,
    compiler: Compiler | None,
    workdir: Path,
    run_build: RunBuild,
    on_broker_error: Callable[[str], None] = lambda operation: None,
) -> JobEngine:
    """arq + Redis when ANE_REDIS_URL is set, else the embedded engine. `store` is the artifact
    cache, `blobs` the uploaded weights; `compiler` and `run_build` (where builds run: the API's
    build pool) serve the embedded engine only (an arq farm builds on its workers);
    `on_broker_error(operation)` counts broker faults."""
    if settings.redis_url:
        from app.jobs.arq_engine import ArqEngine

        return ArqEngine(settings, store, on_broker_error=on_broker_error)
    from app.jobs.embedded import EmbeddedEngine

    return EmbeddedEngine(settings, store, blobs, compiler, workdir, run_build)
