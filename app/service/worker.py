"""What runs inside a build worker process: params + weights -> a packaged zip in the cache's
temp dir, with its digest. The parent publishes it (the cache index lives in the parent).

Errors come back as values (`BuildFailure`), not exceptions: KernelSpecError and Problem carry
keyword state that pickling an exception across the process boundary would lose.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cache.store import Published, publish_files
from app.kernels import KernelBuild, KernelSpecError, build_kernel
from app.packaging import write_kernel_zip
from app.packaging.digesting import DigestingWriter
from app.service.problems import Problem


@dataclass(frozen=True)
class BuildRequest:
    op: str
    params: dict[str, Any]
    weights: dict[str, Any]  # name -> ResolvedWeight (inline array or a mapped file)
    fmt: str  # the packaging format: mlpackage or mil
    target: str
    name: str | None
    dest: Path  # where to write the zip (in the cache's temp dir)
    max_artifact_bytes: int
    publish: PublishTo  # the worker publishes the zip into the cache; the parent indexes it
    verify: bool = False  # add verification.json (app/reference)


@dataclass(frozen=True)
class PublishTo:
    root: Path
    suffix: str
    key: str
    meta: dict[str, Any]  # besides the digest


# Artifacts up to this size come back with the result, so the parent answers without a read.
INLINE_BYTES = 1 << 20


@dataclass(frozen=True)
class BuildResult:
    published: Published  # in place in the cache, with its digest
    seconds: float
    content: bytes | None = None  # the zip itself when it is small


@dataclass(frozen=True)
class BuildFailure:
    status: int
    title: str
    detail: str
    field: str | None = None
    extra: dict[str, Any] | None = None

    def problem(self) -> Problem:
        errors = [{"field": self.field, "message": self.detail}] if self.field else None
        return Problem(self.status, self.detail, title=self.title, field=self.field,
                       errors=errors, **(self.extra or {}))  # fmt: skip


def warm() -> bool:
    """Start the process and pay its one-time costs (imports the jobs unpickle into, the
    builder's first use) before the first real build."""
    import numpy as np

    import app.service.weights  # noqa: F401 - what a BuildRequest's weights unpickle into

    build_kernel("conv", {"in_channels": 1, "out_channels": 1, "spatial": 1},
                 {"weight": np.ones((1, 1), np.float32)})  # fmt: skip
    return True


def build_artifact(req: BuildRequest) -> BuildResult | BuildFailure:
    start = time.perf_counter()
    try:
        arrays = {name: w.array() for name, w in req.weights.items()}
        build = build_kernel(req.op, req.params, arrays, target=req.target, name=req.name)
    except KernelSpecError as exc:
        status = 404 if exc.field == "op" else 422
        return BuildFailure(status, "Invalid kernel request", exc.message, exc.field)
    weight_bytes = _weight_bytes(build)
    if weight_bytes > req.max_artifact_bytes:
        return BuildFailure(
            413,
            "Artifact too large",
            f"this kernel's weights take {weight_bytes} bytes, over the limit of "
            f"{req.max_artifact_bytes} bytes per artifact",
            extra={"limit": req.max_artifact_bytes},
        )
    extra: list = []
    if req.verify:
        from app.reference.verify import verification_entry

        try:
            extra.append(verification_entry(build))
        except KernelSpecError as exc:
            return BuildFailure(422, "Cannot verify", exc.message, exc.field)
    # A digest is reusable only when the packager keeps the uploaded bytes as they are
    # (float32/float16); it converts other dtypes and must hash the converted tensor.
    digests = {n: w.digest for n, w in req.weights.items() if w.dtype in ("float16", "float32")}
    try:
        with open(req.dest, "wb") as f, DigestingWriter(f, keep_up_to=INLINE_BYTES) as out:
            write_kernel_zip(build, out, req.fmt, digests=digests, extra_entries=extra)
            digest, content = out.digest(), out.content()
        p = req.publish
        published = publish_files(p.root, p.suffix, p.key, req.dest, {**p.meta, "digest": digest})
    except BaseException:
        req.dest.unlink(missing_ok=True)
        raise
    return BuildResult(published, time.perf_counter() - start, content)


def _weight_bytes(build: KernelBuild) -> int:
    return sum(
        op.value.data.size * op.value.type.dtype.numpy.itemsize
        for op in build.program.blob_consts()
        if op.value is not None and not isinstance(op.value.data, str)
    )
