"""The build pipeline behind POST /v1/kernels: cache lookup, single-flight, build, package,
(compile), store.

    request -> weights resolved (digests) -> cache key
            -> cache hit?  serve it
            -> else one build per key at a time, in the worker pool:
               build_kernel -> write_kernel_zip (temp file) -> [compiler] -> sha256 -> publish
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cache.keys import artifact_key
from app.cache.singleflight import SingleFlight
from app.cache.store import ContentStore, StoredEntry, sha256_range
from app.kernels import KernelBuild, build_kernel
from app.observability.metrics import Metrics
from app.packaging import write_kernel_zip
from app.service.compiler import Compiler, available_formats
from app.service.pool import BuildPool
from app.service.problems import Problem
from app.service.weights import ResolvedWeight

MEDIA_TYPE = "application/zip"
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

    @property
    def model_name(self) -> str:
        return self.name or self.op

    def key(self) -> str:
        return artifact_key(
            op=self.op,
            params=self.params,
            weights={k: w.key_part for k, w in self.weights.items()},
            fmt=self.fmt,
            target=self.target,
            name=self.model_name,
        )


@dataclass(frozen=True)
class Artifact:
    entry: StoredEntry
    built: bool  # this request's build produced it (X-Cache: miss)

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
        compiler: Compiler | None = None,
        max_artifact_bytes: int = 1 << 62,
    ):
        self.cache, self.pool, self.metrics, self.compiler = cache, pool, metrics, compiler
        self.max_artifact_bytes = max_artifact_bytes
        self._flights: SingleFlight[tuple[StoredEntry, bool]] = SingleFlight()

    def check_format(self, fmt: str) -> None:
        if fmt == "mlmodelc" and self.compiler is None:
            formats = available_formats(self.compiler)
            raise Problem(
                503,
                "format mlmodelc needs a Core ML compiler (a macOS worker) and none is "
                f"configured on this service; available formats: {', '.join(formats)}",
                title="Compiler unavailable",
                field="format",
                available_formats=formats,
            )

    async def artifact(self, job: KernelJob) -> Artifact:
        self.check_format(job.fmt)
        key = job.key()
        if not job.bypass_cache:
            found = self.cache.lookup(key)
            if isinstance(found, StoredEntry):
                self.metrics.cache_hits.labels(job.op).inc()
                return Artifact(found, built=False)

        async def flight() -> tuple[StoredEntry, bool]:
            if not job.bypass_cache:
                entry = await asyncio.to_thread(self.cache.get, key)  # verifies the digest
                if entry is not None:
                    return entry, False
            return await self.pool.run(self._build, job, key), True

        if job.bypass_cache:  # a forced rebuild does not join someone else's build
            entry, built = await flight()
            leader = True
        else:
            (entry, built), leader = await self._flights.do(key, flight)
        miss = built and leader
        (self.metrics.cache_misses if miss else self.metrics.cache_hits).labels(job.op).inc()
        return Artifact(entry, built=miss)

    def _build(self, job: KernelJob, key: str) -> StoredEntry:
        """Runs in a worker thread."""
        start = time.perf_counter()
        self.metrics.builds.labels(job.op).inc()
        arrays = {name: w.array() for name, w in job.weights.items()}
        build = build_kernel(
            job.op, job.params, arrays, target=job.target, name=job.name
        )  # KernelSpecError -> 422 at the handler
        self._check_size(build)
        # A digest is reusable only when the packager keeps the uploaded bytes as they are
        # (float32/float16); it converts other dtypes and must hash the converted tensor.
        digests = {n: w.digest for n, w in job.weights.items() if w.dtype in ("float16", "float32")}
        tmp = self.cache.temp_path()
        try:
            package_fmt = "mlpackage" if job.fmt == "mlmodelc" else job.fmt
            with open(tmp, "wb") as f:
                write_kernel_zip(build, f, package_fmt, digests=digests)
            if job.fmt == "mlmodelc":
                tmp = self._compile(tmp)
            meta = {
                "digest": sha256_range(tmp),
                "filename": f"{job.model_name}.{_EXTENSIONS[job.fmt]}",
                "op": job.op,
                "format": job.fmt,
            }
            entry = self.cache.publish(key, tmp, meta)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.metrics.build_seconds.labels(job.op).observe(time.perf_counter() - start)
        self.metrics.cache_bytes.set(self.cache.total_bytes)
        return entry

    def _check_size(self, build: KernelBuild) -> None:
        weight_bytes = sum(
            op.value.data.size * op.value.type.dtype.numpy.itemsize
            for op in build.program.blob_consts()
            if op.value is not None and not isinstance(op.value.data, str)
        )
        if weight_bytes > self.max_artifact_bytes:
            raise Problem(
                413,
                f"this kernel's weights take {weight_bytes} bytes, over the limit of "
                f"{self.max_artifact_bytes} bytes per artifact",
                title="Artifact too large",
                limit=self.max_artifact_bytes,
            )

    def _compile(self, package: Path) -> Path:
        assert self.compiler is not None
        dest = self.cache.temp_path()
        try:
            self.compiler.compile(package, dest)
        except ValueError as exc:
            dest.unlink(missing_ok=True)
            raise Problem(
                422, f"the compiler rejected the model: {exc}", title="Compile failed"
            ) from None
        finally:
            with contextlib.suppress(OSError):
                package.unlink()
        return dest
