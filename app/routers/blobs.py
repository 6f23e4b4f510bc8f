"""POST /v1/blobs (upload one weight tensor), HEAD/GET /v1/blobs/{digest} (is it there?), and
/v1/blobs/uploads: a whole file of any size in resumable parts (app/uploads/resumable.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from app.api.auth import owner_of
from app.api.context import Services, services
from app.api.examples import UPLOAD_EXAMPLES
from app.api.intake import MULTIPART, media_type, unsupported_media
from app.api.openapi import UPLOAD_BODY, problems
from app.api.problems import Problem
from app.checkpoints.files import stored_whole
from app.core.digest import DIGEST_PATTERN
from app.core.files import discard
from app.schemas.uploads import Upload, UploadStart
from app.schemas.wire import NUMPY_DTYPES, BlobInfo
from app.tensors.headers import TensorFile, sniff, with_digest
from app.uploads.blobstore import describe_file
from app.uploads.hashing import StreamHasher
from app.uploads.resumable import UploadState
from app.uploads.spool import MultipartLimits, declared_length, spool_body, spool_multipart

router = APIRouter(prefix="/v1", tags=["blobs"])

RAW_TYPES = ["application/octet-stream", "application/x-npy", "application/x-safetensors"]
_SHAPE = re.compile(r"^\[?\s*\d+(\s*,\s*\d+)*\s*\]?$")

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
    response_model_exclude_none=True,
    status_code=201,
    responses={
        200: {"description": "Already stored", "model": BlobInfo},
        **problems(400, 401, 413, 415, 422, 503, 507),
    },
    openapi_extra=UPLOAD_BODY,
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
    kind = media_type(request)
    if kind != MULTIPART and kind not in RAW_TYPES and kind:
        raise unsupported_media(kind, [MULTIPART, *RAW_TYPES])
    needed = declared_length(request)
    limit = svc.settings.max_body_bytes if kind == MULTIPART else svc.settings.max_weight_bytes
    await svc.room_for_upload(needed, limit)
    with svc.upload_faults(needed):
        path, hasher = await _spool(request, svc, kind)
        existed, info = await asyncio.to_thread(_store, svc, path, hasher, dtype, raw_shape)
    if existed:
        response.status_code = 200
    return info


async def _spool(
    request: Request, svc: Services, kind: str
) -> tuple[FilePath, StreamHasher | None]:
    """The upload's tensor file in the blob store's spool, and its hasher."""
    settings = svc.settings
    if kind == MULTIPART:
        body = await spool_multipart(request, MultipartLimits.of(settings), set(), svc.spool_path)
        if set(body.files) != {"file"}:
            body.cleanup()
            raise Problem(
                422,
                f"expected exactly one part named `file`, got {sorted(body.files) or 'none'}",
                title="Invalid upload",
                field="file",
            )
        return body.files["file"].path, body.files["file"].hasher
    path, hasher = svc.spool_path(), StreamHasher()
    try:
        await spool_body(request, path, settings.max_weight_bytes, "the uploaded tensor", hasher)
    except BaseException:
        hasher.close()
        discard(path)
        raise
    return path, hasher


def _store(
    svc: Services,
    path: FilePath,
    hasher: StreamHasher | None,
    dtype: str | None,
    shape: tuple[int, ...] | None,
) -> tuple[bool, BlobInfo]:
    try:
        count = stored_whole(path)  # every range of a safetensors file checked
        if count is not None:  # a checkpoint (or a shard of one, or a BF16 tensor): stored whole
            if hasher is not None:
                hasher.close()
            digest, size, existed = svc.blobs.put_checkpoint(path, count)
            return existed, BlobInfo(
                digest=digest, dtype="safetensors", shape=[], bytes=size, tensors=count
            )
        tensor = sniff(path, "file", raw_dtype=dtype, raw_shape=shape)
        tensor = with_digest(tensor, hasher.result() if hasher is not None else None)
        existed = svc.blobs.has_tensor(tensor.digest)
        tensor = svc.blobs.put(tensor)
        return existed, _info(tensor)
    except BaseException:
        if hasher is not None:
            hasher.close()
        discard(path)
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
    response_model_exclude_none=True,
    responses=problems(401, 404, 422),
)
async def get_blob(digest: DigestPath, svc: Services = Depends(services)) -> BlobInfo:
    tensor = await asyncio.to_thread(svc.blobs.get, digest)
    if tensor is None:
        entry = await asyncio.to_thread(svc.blobs.file, digest)
        if entry is not None:
            return BlobInfo(**describe_file(entry))
        raise Problem(404, f"no blob {digest}", title="Unknown blob", field="path.digest")
    return _info(tensor)


def _info(tensor: TensorFile) -> BlobInfo:
    return BlobInfo(
        digest=tensor.digest, dtype=tensor.dtype.name, shape=list(tensor.shape), bytes=tensor.nbytes
    )


# -- resumable uploads of whole files ------------------------------------------------------------

UploadId = Annotated[
    str, Path(description="the id `POST /v1/blobs/uploads` answered", max_length=64)
]


def _upload(state: UploadState, blob: dict | None = None) -> Upload:
    return Upload(**state.to_json(), blob=BlobInfo(**blob) if blob is not None else None)


@router.post(
    "/blobs/uploads",
    summary="Start a resumable upload of one whole file (a checkpoint's shard, config, tokenizer)",
    response_model=Upload,
    response_model_exclude_none=True,
    status_code=201,
    responses={
        200: {"description": "Stored already: nothing to send", "model": Upload},
        **problems(400, 401, 413, 422, 507),
    },
)
async def start_upload(
    body: Annotated[UploadStart, Body(openapi_examples=UPLOAD_EXAMPLES)],
    request: Request,
    response: Response,
    svc: Services = Depends(services),
) -> Upload:
    # A declaration evicts nothing: over the key's quota, or more than the volume could hold
    # with every cached artifact gone, it is refused here; the parts make room as they come.
    owner = owner_of(request.scope)
    state = await asyncio.to_thread(svc.uploads.start, body.digest, body.bytes, owner)
    if state.stored:
        entry = await asyncio.to_thread(svc.blobs.file, state.digest)
        if entry is not None:  # else evicted since: the upload starts over
            response.status_code = 200
            return _upload(state, describe_file(entry))
    return _upload(state)


@router.get(
    "/blobs/uploads/{upload_id}",
    summary="An upload's progress: where to resume",
    response_model=Upload,
    response_model_exclude_none=True,
    responses=problems(401, 404, 422),
)
async def upload_state(
    upload_id: UploadId, request: Request, svc: Services = Depends(services)
) -> Upload:
    return _upload(await asyncio.to_thread(svc.uploads.state, upload_id, owner_of(request.scope)))


@router.put(
    "/blobs/uploads/{upload_id}",
    summary="Send one part, starting at the bytes received so far",
    response_model=Upload,
    response_model_exclude_none=True,
    responses=problems(400, 401, 404, 409, 413, 422, 504, 507),
    openapi_extra={
        "requestBody": {
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
            "required": True,
        }
    },
)
async def upload_part(
    upload_id: UploadId,
    request: Request,
    offset: Annotated[int, Query(ge=0, description="where the part starts: `received`")],
    svc: Services = Depends(services),
) -> Upload:
    owner, length = owner_of(request.scope), declared_length(request)
    async with svc.uploads.locked(upload_id, owner):
        await svc.room_for_upload(length, svc.settings.upload_part_bytes)
        with svc.upload_faults(length):
            state = await svc.uploads.write_part(upload_id, offset, length, request.stream(), owner)
    return _upload(state)


@router.post(
    "/blobs/uploads/{upload_id}/finish",
    summary="Check the whole file's digest and store it",
    response_model=Upload,
    response_model_exclude_none=True,
    responses=problems(401, 404, 409, 422, 507),
)
async def finish_upload(
    upload_id: UploadId, request: Request, svc: Services = Depends(services)
) -> Upload:
    owner = owner_of(request.scope)
    async with svc.uploads.locked(upload_id, owner):
        with svc.upload_faults(None):
            state, blob = await asyncio.to_thread(svc.uploads.finish, upload_id, owner)
    return _upload(state, blob)


@router.delete(
    "/blobs/uploads/{upload_id}",
    summary="Drop an upload in progress and the bytes it holds",
    status_code=204,
    responses={204: {"description": "Dropped"}, **problems(401, 404, 422)},
)
async def delete_upload(
    upload_id: UploadId, request: Request, svc: Services = Depends(services)
) -> Response:
    owner = owner_of(request.scope)
    async with svc.uploads.locked(upload_id, owner):
        await asyncio.to_thread(svc.uploads.delete, upload_id, owner)
    return Response(status_code=204)
