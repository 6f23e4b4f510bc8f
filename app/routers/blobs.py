"""POST /v1/blobs (upload one weight tensor), HEAD/GET /v1/blobs/{digest} (is it there?)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.routers.responses import problems
from app.schemas.requests import DIGEST_PATTERN, NUMPY_DTYPES, BlobInfo
from app.service.context import Services, services
from app.service.intake import MULTIPART, media_type, unsupported_media
from app.service.problems import Problem
from app.uploads.hashing import StreamHasher
from app.uploads.spool import MultipartLimits, spool_body, spool_multipart
from app.uploads.tensors import TensorFile, sniff, with_digest

router = APIRouter(prefix="/v1", tags=["blobs"])

RAW_TYPES = ["application/octet-stream", "application/x-npy", "application/x-safetensors"]
_SHAPE = re.compile(r"^\[?\s*\d+(\s*,\s*\d+)*\s*\]?$")

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}
DigestPath = Annotated[
    str,
    Path(
        description="`sha256:<hex>` or the bare hex",
        pattern=DIGEST_PATTERN,
        examples=["sha256:" + "0" * 64],
    ),
]


def _shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    if not _SHAPE.match(text):
        raise Problem(
            422,
            f"shape {text!r} must be comma-separated positive integers, e.g. 64,64",
            title="Invalid request",
            field="query.shape",
        )
    return tuple(int(d) for d in text.strip("[] ").split(","))


@router.post(
    "/blobs",
    summary="Upload one weight tensor",
    response_model=BlobInfo,
    status_code=201,
    responses={
        200: {"description": "Already stored", "model": BlobInfo},
        **problems(400, 401, 413, 415, 422),
    },
    openapi_extra=_UPLOAD_BODY,
)
async def upload_blob(
    request: Request,
    response: Response,
    dtype: Annotated[
        str | None,
        Query(
            description=f"raw bytes only: one of {', '.join(NUMPY_DTYPES)}", examples=["float32"]
        ),
    ] = None,
    shape: Annotated[
        str | None, Query(description="raw bytes only: e.g. 64,64", examples=["2,2"])
    ] = None,
    svc: Services = Depends(services),
) -> BlobInfo:
    if dtype is not None and dtype not in NUMPY_DTYPES:
        raise Problem(
            422,
            f"dtype {dtype!r} is not one of {', '.join(NUMPY_DTYPES)}",
            title="Invalid request",
            field="query.dtype",
        )
    raw_shape = _shape(shape)
    settings = svc.settings
    kind = media_type(request)
    if kind == MULTIPART:
        limits = MultipartLimits(
            settings.max_json_bytes, settings.max_weight_bytes, settings.max_body_bytes
        )
        body = await spool_multipart(request, limits, set(), svc.spool_path)
        try:
            if set(body.files) != {"file"}:
                raise Problem(
                    422,
                    f"expected exactly one part named `file`, got {sorted(body.files) or 'none'}",
                    title="Invalid upload",
                    field="file",
                )
            path, hasher = body.files["file"].path, body.files["file"].hasher
        except BaseException:
            body.cleanup()
            raise
    elif kind in RAW_TYPES or not kind:
        path, hasher = svc.spool_path(), StreamHasher()
        try:
            await spool_body(
                request, path, settings.max_weight_bytes, "the uploaded tensor", hasher
            )
        except BaseException:
            hasher.close()
            path.unlink(missing_ok=True)
            raise
    else:
        raise unsupported_media(kind, [MULTIPART, *RAW_TYPES])
    existed, tensor = await asyncio.to_thread(_store, svc, path, hasher, dtype, raw_shape)
    if existed:
        response.status_code = 200
    return BlobInfo(
        digest=tensor.digest,
        dtype=tensor.dtype.name,
        shape=list(tensor.shape),
        bytes=tensor.nbytes,
    )


def _store(
    svc: Services,
    path: FilePath,
    hasher: StreamHasher | None,
    dtype: str | None,
    shape: tuple[int, ...] | None,
) -> tuple[bool, TensorFile]:
    try:
        tensor = sniff(path, "file", raw_dtype=dtype, raw_shape=shape)
        tensor = with_digest(tensor, hasher.result() if hasher is not None else None)
        existed = tensor.digest in svc.blobs
        return existed, svc.blobs.put(tensor)
    except BaseException:
        if hasher is not None:
            hasher.close()
        path.unlink(missing_ok=True)
        raise


@router.head(
    "/blobs/{digest}",
    summary="Is this blob stored?",
    responses={
        200: {"description": "Stored"},
        404: {"description": "Not stored"},
        **problems(401, 422),
    },
)
async def has_blob(digest: DigestPath, svc: Services = Depends(services)) -> Response:
    return Response(status_code=200 if digest in svc.blobs else 404)


@router.get(
    "/blobs/{digest}",
    summary="Describe a stored blob",
    response_model=BlobInfo,
    responses=problems(401, 404, 422),
)
async def get_blob(digest: DigestPath, svc: Services = Depends(services)) -> BlobInfo:
    tensor = await asyncio.to_thread(svc.blobs.get, digest)
    if tensor is None:
        raise Problem(404, f"no blob {digest}", title="Unknown blob", field="path.digest")
    return BlobInfo(
        digest=tensor.digest, dtype=tensor.dtype.name, shape=list(tensor.shape), bytes=tensor.nbytes
    )
