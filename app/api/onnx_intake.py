"""Reads POST /v1/onnx off the wire: a JSON body naming the model's files by blob digest, or a
multipart body (a `spec` part plus one file part per file, named as the model names it) for
models small enough to send in one request. Either becomes a request of kind onnx whose weights
are the files."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from app.api.context import Services
from app.api.intake import (
    JSON_TYPES,
    MULTIPART,
    media_type,
    multipart_with_spec,
    parse_json,
    unsupported_media,
    validation_problem,
)
from app.api.problems import Problem
from app.errors import ErrorKind, RequestError
from app.request import KernelRequest, WeightRef
from app.schemas.onnx import OnnxBody, OnnxSpec
from app.schemas.wire import RequestOptions
from app.uploads.spool import read_small_body


@contextlib.asynccontextmanager
async def incoming_onnx(
    request: Request, svc: Services, bypass: bool
) -> AsyncIterator[KernelRequest]:
    """The request of a POST /v1/onnx; spooled parts are removed when the block ends."""
    kind = media_type(request)
    settings = svc.settings
    if kind in JSON_TYPES:
        data = parse_json(await read_small_body(request, settings.max_json_bytes), "the body")
        body = _validated(OnnxBody, data)
        yield _request(body, await _stored(body.files, svc), bypass)
        return
    if kind != MULTIPART:
        raise unsupported_media(kind, ["application/json", MULTIPART])
    async with multipart_with_spec(request, svc) as (data, parts):
        spec = _validated(OnnxSpec, data)
        files = await _stored(spec.files, svc)
        for name, part in parts.files.items():
            if name in files:
                raise RequestError(
                    f"files.{name}", f"{name!r} is given twice: in the spec and as a part"
                )
            streamed = part.hasher.result() if part.hasher is not None else None
            files[name] = await asyncio.to_thread(_part, part.path, streamed)
        yield _request(spec, files, bypass)


def _part(path: Path, streamed: tuple[int, int, str] | None) -> WeightRef:
    """A file part as the import's file: its digest the one hashed as it arrived when that
    covered the whole file (it always does for a part that is not a tensor file), else read."""
    whole = streamed is not None and streamed[:2] == (0, path.stat().st_size)
    ref = WeightRef.of_file(path, streamed[2] if streamed is not None and whole else None)
    return WeightRef(ref.digest, ref.dtype, ref.shape, file=ref.file, spooled=True)


def _validated(model: type[BaseModel], data: Any) -> Any:
    if not isinstance(data, dict):
        raise Problem(422, "the request body must be a JSON object", title="Invalid request")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc.errors(), skip=0) from None


async def _stored(files: dict[str, str], svc: Services) -> dict[str, WeightRef]:
    found = {}
    for name, digest in files.items():
        path = await asyncio.to_thread(svc.blobs.file_path, digest)
        if path is None:
            raise RequestError(
                f"files.{name}",
                f"no blob {digest}: upload the file with /v1/blobs/uploads first",
                kind=ErrorKind.NOT_FOUND,
                title="Unknown blob",
            )
        found[name] = await asyncio.to_thread(WeightRef.of_file, path, digest)
    return found


def _request(body: OnnxBody, files: dict[str, WeightRef], bypass: bool) -> KernelRequest:
    model = body.model
    if model is None:
        models = [n for n in files if n.endswith(".onnx")]
        if len(models) != 1:
            raise RequestError(
                "model", f"name the model among the files ({', '.join(sorted(files))})"
            )
        model = models[0]
    options = {k: getattr(body, k) for k in RequestOptions.model_fields}
    options["bypass_cache"] = bypass or options["bypass_cache"]
    onnx = {"model": model, "shapes": body.shapes, "io_dtype": body.io_dtype}
    return KernelRequest.create(
        onnx=onnx, weights=files, passes=body.passes, quantize=body.quantize, **options
    )
