"""Turning requests into `JobSpec`s and back into tensors on a worker.

The HTTP layer hands over the `KernelJob` its intake already validated (`from_kernel_job`);
Python callers, the CLI and benchmarks use `make_spec`, which validates through the same request
models, so both produce the same spec and therefore the same key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from app.digest import tensor_digest
from app.jobs.model import JobSpec, WeightRef
from app.kernels import KernelSpecError
from app.schemas.requests import REQUEST_MODELS, split_request

if TYPE_CHECKING:
    from app.service.kernels import KernelJob
    from app.uploads.blobstore import BlobStore


def from_kernel_job(job: KernelJob) -> JobSpec:
    weights = {}
    for name, w in job.weights.items():
        inline = w.inline.tolist() if w.inline is not None else None
        weights[name] = WeightRef(
            digest=w.digest, dtype=w.dtype, shape=list(w.shape), inline=inline
        )
    return JobSpec(
        op=job.op,
        params=job.params,
        format=job.fmt,  # type: ignore[arg-type]
        target=job.target,
        name=job.name,
        weights=weights,
        bypass_cache=job.bypass_cache,
        verify=getattr(job, "verify", False),
    )


def make_spec(
    op: str,
    params: Mapping[str, Any],
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    format: str = "mlpackage",
    target: str = "ios18",
    name: str | None = None,
    bypass_cache: bool = False,
    verify: bool = False,
) -> JobSpec:
    """A spec from Python values; weights travel inline (keep them small: they go through
    Redis; large tensors belong in the blob store, referenced by digest)."""
    if op not in REQUEST_MODELS:
        raise KernelSpecError(
            "op", f"unknown op {op!r}; the catalog has {', '.join(REQUEST_MODELS)}"
        )
    body = {"op": op, **params, "format": format, "target": target, "name": name}
    try:
        req = REQUEST_MODELS[op].model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        field = loc if loc in ("format", "target", "name") else f"params.{loc}"
        raise KernelSpecError(field, err["msg"]) from None
    op, normalised, options = split_request(req)
    refs = {}
    for wname, array in (weights or {}).items():
        array = np.asarray(array)
        refs[wname] = WeightRef(
            digest=tensor_digest(array),
            dtype=array.dtype.name,
            shape=list(array.shape),
            inline=array.tolist(),
        )
    return JobSpec(
        op=op,
        params=normalised,
        format=options.format,
        target=options.target,
        name=options.name,
        weights=refs,
        bypass_cache=bypass_cache,
        verify=verify,
    )


def resolve_weights(spec: JobSpec, blobs: BlobStore) -> dict[str, np.ndarray]:
    """The spec's tensors: inline values, or blobs mapped from the shared blob store. Blocking."""
    arrays = {}
    for name, ref in spec.weights.items():
        field = f"weights.{name}"
        if ref.inline is not None:
            array = np.asarray(ref.inline, dtype=ref.dtype).reshape(ref.shape)
            if tensor_digest(array) != ref.digest:
                raise KernelSpecError(field, "inline values do not match their digest")
            arrays[name] = array
            continue
        tensor = blobs.get(ref.digest) or _uploaded_elsewhere(blobs, ref.digest)
        if tensor is None:
            raise KernelSpecError(
                field,
                f"blob {ref.digest} is not in the blob store this worker shares with the API "
                "(evicted since the request, or the worker is not on the shared data volume)",
            )
        arrays[name] = tensor.array()
    return arrays


def _uploaded_elsewhere(blobs: BlobStore, digest: str):
    """A blob the API (another process) stored after this worker indexed the blob store."""
    from app.jobs.artifacts import foreign_entry
    from app.uploads.blobstore import _tensor, digest_hex

    key = digest_hex(digest)
    entry = foreign_entry(blobs.store, key) if key else None
    return _tensor(entry) if entry is not None else None
