"""Turns the weights of a kernel request into tensors: inline lists, blob digests, file parts.

Every tensor comes back with its digest, dtype and shape (the cache key needs them before any
build) and a way to get the array (a memmap for stored blobs, so nothing large is copied).

A file part of a multipart request stays in its spool file, which goes when the request ends:
keeping a copy in the blob store would cost a second write of every upload that nobody asked
for (a tensor meant for reuse is uploaded to /v1/blobs). Jobs outlive their request, so their
parts are published into the blob store (`keep_parts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.kernels import get_kernel, parse_params
from app.packaging import tensor_digest
from app.schemas.requests import RawWeight
from app.service.problems import Problem
from app.uploads.blobstore import BlobStore
from app.uploads.spool import SpooledPart
from app.uploads.tensors import TensorFile, sniff, with_digest


@dataclass(frozen=True)
class ResolvedWeight:
    digest: str
    dtype: str
    shape: tuple[int, ...]
    inline: np.ndarray | None = None
    stored: TensorFile | None = None
    spooled: bool = False  # `stored` is a request's spool file, not a blob-store entry

    def array(self) -> np.ndarray:
        if self.inline is not None:
            return self.inline
        assert self.stored is not None
        return self.stored.array()

    @property
    def key_part(self) -> tuple[str, str, tuple[int, ...]]:
        return self.digest, self.dtype, self.shape

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def _invalid(field: str, detail: str) -> Problem:
    return Problem(422, f"{field}: {detail}", title="Invalid weight", field=field)


def inline_tensor(name: str, value: list[Any]) -> ResolvedWeight:
    field = f"weights.{name}"
    try:
        array = np.asarray(value, dtype=np.float32)
    except (ValueError, TypeError):
        raise _invalid(
            field, "an inline weight must be a rectangular nested list of numbers"
        ) from None
    if array.ndim == 0 or array.size == 0:
        raise _invalid(field, "an inline weight must be a non-empty (nested) list")
    return ResolvedWeight(tensor_digest(array), "float32", array.shape, inline=array)


def stored_tensor(name: str, digest: str, blobs: BlobStore) -> ResolvedWeight:
    """Blocking (the first use of a blob checks its digest): call off the event loop."""
    tensor = blobs.get(digest)
    if tensor is None:
        raise Problem(
            422,
            f"weights.{name}: no blob {digest}; upload it with POST /v1/blobs first "
            "(HEAD /v1/blobs/{digest} says whether it is there)",
            title="Unknown blob",
            field=f"weights.{name}",
        )
    return _resolved(tensor)


def _resolved(tensor: TensorFile) -> ResolvedWeight:
    return ResolvedWeight(tensor.digest, tensor.dtype.name, tensor.shape, stored=tensor)


def part_tensor(
    op: str,
    params: Mapping[str, Any],
    part: SpooledPart,
    raw: RawWeight | None,
) -> ResolvedWeight:
    """A multipart file part, sniffed and hashed where it was spooled. Blocking."""
    field = f"weights.{part.name}"
    dtype, shape = _raw_defaults(op, params, part.name)
    if raw is not None:
        dtype = raw.dtype or dtype
        shape = tuple(raw.shape) if raw.shape else shape
    tensor = sniff(part.path, field, tensor_name=part.name, raw_dtype=dtype, raw_shape=shape)
    streamed = part.hasher.result() if part.hasher is not None else None
    tensor = with_digest(tensor, streamed)
    return ResolvedWeight(tensor.digest, tensor.dtype.name, tensor.shape, stored=tensor,
                          spooled=True)  # fmt: skip


def keep_parts(
    weights: Mapping[str, ResolvedWeight], blobs: BlobStore
) -> dict[str, ResolvedWeight]:
    """The same weights with every spooled part moved into the blob store. Blocking."""
    return {
        name: _resolved(blobs.put(w.stored)) if w.spooled and w.stored is not None else w
        for name, w in weights.items()
    }


def _raw_defaults(
    op: str, params: Mapping[str, Any], weight: str
) -> tuple[str | None, tuple[int, ...] | None]:
    """Raw bytes default to the dtype the op stores the weight in and the shape it expects."""
    kernel = get_kernel(op)
    for spec in kernel.weights(parse_params(kernel, params)):
        if spec.name == weight:
            return spec.dtype.numpy.name, spec.shape
    return None, None


def check_part_names(op: str, params: Mapping[str, Any], names: list[str]) -> None:
    kernel = get_kernel(op)
    expected = [s.name for s in kernel.weights(parse_params(kernel, params))]
    for name in names:
        if name not in expected:
            takes = ", ".join(expected) or "no weights"
            raise Problem(
                422,
                f"unexpected part {name!r}: a {op} request takes a `spec` part plus one file "
                f"part per weight ({takes})",
                title="Unexpected multipart part",
                field=name,
            )
