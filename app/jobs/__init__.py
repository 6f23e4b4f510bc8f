"""Jobs: a request queued, generated, compiled on a worker, watched and fetched.

engine = make_engine(JobSettings(), cache=..., blobs=..., compiler=select_compiler(), workdir=...)
await engine.start()
job = await engine.submit(from_kernel_job(kernel_job))     # or make_spec(op, params, ...)
job = await engine.get(job.id); path = await engine.artifact_path(job)
await engine.close()
"""

from __future__ import annotations

from pathlib import Path

from app.compile import Compiler
from app.jobs.artifacts import SharedArtifacts
from app.jobs.config import QUEUE_LINUX, QUEUE_MACOS, JobSettings
from app.jobs.engine import JobEngine, queue_for
from app.jobs.model import TERMINAL, Job, JobError, JobSpec, JobState, WorkerInfo
from app.jobs.spec import from_kernel_job, make_spec


def make_engine(
    settings: JobSettings,
    *,
    cache,
    blobs,
    compiler: Compiler | None,
    workdir: Path,
) -> JobEngine:
    """arq + Redis when ANE_REDIS_URL is set, else the embedded engine. `cache` is the service's
    ContentStore, `blobs` its BlobStore; `compiler` serves the embedded engine only (an arq
    farm compiles on its macOS workers)."""
    artifacts = SharedArtifacts(cache)
    if settings.redis_url:
        from app.jobs.arq_engine import ArqEngine

        return ArqEngine(settings, artifacts)
    from app.jobs.embedded import EmbeddedEngine

    return EmbeddedEngine(settings, artifacts, blobs, compiler, workdir)


__all__ = [
    "QUEUE_LINUX",
    "QUEUE_MACOS",
    "TERMINAL",
    "Job",
    "JobEngine",
    "JobError",
    "JobSettings",
    "JobSpec",
    "JobState",
    "SharedArtifacts",
    "WorkerInfo",
    "from_kernel_job",
    "make_engine",
    "make_spec",
    "queue_for",
]
