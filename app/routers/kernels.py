"""POST /v1/kernels and /v1/kernels/{op}: a kernel request in, a zip out (cached, single-flight)."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter, ValidationError

from app.kernels import KERNELS
from app.routers.compiled import serve_compiled
from app.routers.responses import problems
from app.service.context import Services, services_of
from app.service.intake import job_from_json, read_request
from app.service.kernels import MEDIA_TYPE, Artifact
from app.service.problems import from_validation_errors

router = APIRouter(prefix="/v1", tags=["kernels"])

_CHUNK = 1 << 20

CONV_EXAMPLE = {
    "op": "conv",
    "in_channels": 2,
    "out_channels": 2,
    "spatial": 4,
    "weights": {"weight": [[1.0, 0.0], [0.0, 1.0]]},
}
EXAMPLES = {
    "conv_inline": {
        "summary": "conv with inline weights",
        "value": CONV_EXAMPLE,
    },
    "conv_mil_ios17": {
        "summary": "conv with bias as a MIL bundle for iOS 17",
        "value": {
            **CONV_EXAMPLE,
            "bias": True,
            "format": "mil",
            "target": "ios17",
            "name": "proj",
            "weights": {"weight": [[0.5, 0.0], [0.0, 0.5]], "bias": [0.1, -0.1]},
        },
    },
    "sdpa": {
        "summary": "causal attention (no weights)",
        "value": {"op": "sdpa", "n_heads": 2, "head_dim": 8, "seq_len": 4, "causal": True},
    },
    "rmsnorm_blob": {
        "summary": "rmsnorm with a weight uploaded to /v1/blobs",
        "value": {
            "op": "rmsnorm",
            "channels": 4,
            "spatial": 8,
            "weights": {"weight": "sha256:" + "0" * 64},
        },
    },
}
MULTIPART_SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {
            "type": "string",
            "description": "the JSON kernel request (as for application/json)",
            "example": '{"op": "conv", "in_channels": 2, "out_channels": 2, "spatial": 4}',
        },
    },
    "additionalProperties": {
        "type": "string",
        "format": "binary",
        "description": "one part per weight, named after it: .npy, safetensors, or raw "
        "little-endian bytes (dtype and shape from spec.weights.<name> or the op's defaults)",
    },
}


def _request_body(ref: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{ref}"},
                    "examples": EXAMPLES,
                },
                "multipart/form-data": {"schema": MULTIPART_SCHEMA},
            },
        }
    }


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The zipped artifact. `X-Cache` says whether this request built it.",
        "content": {MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        "headers": {
            "ETag": {"description": "the artifact digest", "schema": {"type": "string"}},
            "X-Cache": {"schema": {"type": "string", "enum": ["hit", "miss"]}},
        },
    },
    304: {"description": "Not modified: If-None-Match matched the artifact digest"},
    **problems(400, 401, 404, 413, 415, 422, 503),
}
# The two parameters are read by hand and declared here for the OpenAPI document: resolving
# them through FastAPI's dependency machinery cost more than serving a cached artifact.
_BYPASS_PARAMETER = {
    "name": "bypass_cache",
    "in": "query",
    "required": False,
    "description": "build again even if cached (same as `bypass_cache` in the body)",
    "schema": {"type": "boolean", "default": False, "title": "Bypass Cache"},
}
_OP_PARAMETER = {
    "name": "op",
    "in": "path",
    "required": True,
    "description": "a catalog op (GET /v1/ops)",
    "schema": {"type": "string", "enum": list(KERNELS), "examples": ["conv"], "title": "Op"},
}
_BOOL = TypeAdapter(bool)


def _bypass(request: Request) -> bool:
    value = request.query_params.get("bypass_cache")
    if value is None:
        return False
    try:
        return _BOOL.validate_python(value)
    except ValidationError as exc:  # the same problem FastAPI's own check would give
        errors = [{**e, "loc": ("query", "bypass_cache")} for e in exc.errors()]
        raise from_validation_errors(errors) from None


@router.post(
    "/kernels/{op}",
    summary="Build a kernel (op in the path)",
    response_class=Response,
    responses=_RESPONSES,
    openapi_extra={
        **_request_body("KernelRequest"),
        "parameters": [_OP_PARAMETER, _BYPASS_PARAMETER],
    },
)
async def build_kernel_for_op(request: Request) -> Response:
    op = request.path_params["op"]
    return await _serve(request, services_of(request), op, _bypass(request))


@router.post(
    "/kernels",
    summary="Build a kernel (op in the body)",
    response_class=Response,
    responses=_RESPONSES,
    openapi_extra={**_request_body("KernelRequest"), "parameters": [_BYPASS_PARAMETER]},
)
async def build_kernel(request: Request) -> Response:
    return await _serve(request, services_of(request), None, _bypass(request))


async def _serve(request: Request, svc: Services, op: str | None, bypass: bool) -> Response:
    if op is not None:
        request.state.op = op
    intake = await read_request(request, svc, op, bypass)
    try:
        if intake.job is not None and intake.job.fmt == "mlmodelc":
            return await serve_compiled(request, svc, intake.job, _matches)
        if intake.artifact is not None:
            artifact = intake.artifact
        else:
            assert intake.job is not None
            request.state.op = intake.job.op
            artifact = await svc.kernels.artifact(intake.job, intake.fingerprint)
        request.state.op = artifact.op
        try:
            response = _respond(artifact, request, svc)
        except FileNotFoundError:  # evicted between lookup and open: the long way, once more
            job = intake.job
            if job is None:  # a memo hit: parse the body kept for this
                assert intake.raw is not None
                job = await job_from_json(intake.raw, svc, op, bypass)
            artifact = await svc.kernels.artifact(job)
            response = _respond(artifact, request, svc)
    finally:
        if intake.body is not None:
            intake.body.cleanup()  # the spooled parts (a job's are in the blob store by now)
    request.state.cache = "miss" if artifact.built else "hit"
    return response


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags or etag.strip('"') in tags


def _respond(artifact: Artifact, request: Request, svc: Services) -> Response:
    headers = {
        "ETag": artifact.etag,
        "X-Cache": "miss" if artifact.built else "hit",
        "Cache-Control": "no-cache",  # revalidate with If-None-Match; the ETag is the content
    }
    if _matches(request.headers.get("if-none-match"), artifact.etag):
        return Response(status_code=304, headers=headers)
    headers["Content-Disposition"] = f'attachment; filename="{artifact.filename}"'
    content = svc.kernels.small_content(artifact)
    if content is not None:
        return Response(content, media_type=MEDIA_TYPE, headers=headers)
    headers["Content-Length"] = str(artifact.entry.size)
    f = open(artifact.entry.path, "rb")  # noqa: SIM115 - held open so eviction cannot race
    return StreamingResponse(_chunks(f), media_type=MEDIA_TYPE, headers=headers)


async def _chunks(f):
    try:
        while chunk := await anyio.to_thread.run_sync(f.read, _CHUNK):
            yield chunk
    finally:
        f.close()
