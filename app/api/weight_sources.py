"""The weights of a kernel request as they come over the wire -> `WeightRef`s: inline lists,
blob digests, multipart file parts.

Every weight comes back with its digest, dtype and shape (the cache key needs them before any
build) and where its values are (a memmap for stored blobs and parts, so nothing large is
copied). A file part stays in its request's spool file, which goes when the request ends:
keeping a copy in the blob store would cost a second write of every upload nobody asked for (a
tensor meant for reuse is uploaded to /v1/blobs); a job keeps its parts (`BlobStore.keep_weights`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.core.digest import tensor_digest
from app.errors import ErrorKind, RequestError
from app.request import KernelRequest, WeightRef
from app.schemas.wire import RawWeight
from app.tensors.headers import TensorFile, sniff, with_digest
from app.uploads.blobstore import BlobStore
from app.uploads.spool import SpooledPart


def _invalid(field: str, detail: str) -> RequestError:
    return RequestError(field, detail, title="Invalid weight")


def inline_tensor(field: str, value: list[Any]) -> WeightRef:
    """An inline nested list (row-major, read as float32); `field` names it in the request."""
    try:
        array = np.asarray(value, dtype=np.float32)
    except (ValueError, TypeError):
        raise _invalid(
            field, "an inline weight must be a rectangular nested list of numbers"
        ) from None
    if array.ndim == 0 or array.size == 0:
        raise _invalid(field, "an inline weight must be a non-empty (nested) list")
    return WeightRef(tensor_digest(array), "float32", array.shape, inline=array)


def stored_tensor(field: str, digest: str, blobs: BlobStore) -> WeightRef:
    """A blob, or `digest#tensor`: one tensor of an uploaded checkpoint file, in fp16. Blocking
    (the first use of a blob checks its digest; a checkpoint tensor is converted): call off the
    event loop."""
    digest, _, name = digest.partition("#")
    if name:
        return _ref(blobs.checkpoint_tensor(field, digest, name))
    tensor = blobs.get(digest)
    if tensor is None and blobs.checkpoint(digest) is not None:
        raise RequestError(
            field,
            f"blob {digest} is a safetensors file of many tensors: name "
            f"one as {digest}#<tensor name>",
            title="Invalid weight",
        )
    if tensor is None:
        raise RequestError(
            field,
            f"no blob {digest}; upload it with POST /v1/blobs first "
            "(HEAD /v1/blobs/{digest} says whether it is there)",
            title="Unknown blob",
        )
    return _ref(tensor)


def _ref(tensor: TensorFile, spooled: bool = False) -> WeightRef:
    return WeightRef(tensor.digest, tensor.dtype.name, tensor.shape, file=tensor, spooled=spooled)


def part_tensor(
    field: str,
    part: SpooledPart,
    raw: RawWeight | None,
    defaults: tuple[str | None, tuple[int, ...] | None] = (None, None),
) -> WeightRef:
    """A multipart file part, sniffed and hashed where it was spooled; raw bytes are read as
    `raw` says, else with `defaults` (dtype, shape). Blocking."""
    dtype, shape = defaults
    if raw is not None:
        dtype = raw.dtype or dtype
        shape = tuple(raw.shape) if raw.shape else shape
    tensor = sniff(part.path, field, tensor_name=part.name, raw_dtype=dtype, raw_shape=shape)
    streamed = part.hasher.result() if part.hasher is not None else None
    return _ref(with_digest(tensor, streamed), spooled=True)


def raw_defaults(request: KernelRequest, weight: str) -> tuple[str | None, tuple[int, ...] | None]:
    """Raw bytes default to the dtype the op stores the weight in and the shape it expects."""
    for spec in request.weight_specs:
        if spec.name == weight:
            return spec.dtype.numpy.name, spec.shape
    return None, None


def check_part_names(request: KernelRequest, names: list[str]) -> None:
    expected = [s.name for s in request.weight_specs]
    for name in names:
        if name not in expected:
            takes = ", ".join(expected) or "no weights"
            raise RequestError(
                name,
                f"unexpected part {name!r}: a {request.op} request takes a `spec` part plus one "
                f"file part per weight ({takes})",
                kind=ErrorKind.INVALID,
                title="Unexpected multipart part",
            )
