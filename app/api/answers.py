"""Artifacts as HTTP answers: ETag, X-Cache, conditional requests, in-memory or streamed bodies."""

from __future__ import annotations

import anyio
from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.api.openapi import ZIP
from app.devices import Chip
from app.estimates import devices_or_error, header_value, works_from_json
from app.service.kernels import Pending, Served

_CHUNK = 1 << 20
PREFLIGHT_HEADER = "X-ANE-Preflight"  # the ANE preflight's counts per severity and rules fired
ESTIMATE_HEADER = "X-ANE-Estimate"  # predicted latency and bound on the default devices


def matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags or etag.strip('"') in tags


def estimate_devices(request: Request) -> list[Chip]:
    """The devices X-ANE-Estimate covers: the request's `device` query values, or the default
    set. Read before the build, so an unknown name is a 422 that costs nothing."""
    return devices_or_error(request.query_params.getlist("device"))


# An artifact's estimate follows from its content (the ETag) and the devices: kept, so a cache
# hit does not price its programs again (~50 µs, a fifth of a hit's cost).
_ESTIMATES: dict[tuple[str, tuple[str, ...]], str] = {}
_ESTIMATES_MAX = 4096


def _estimate(answer: Served, devices: list[Chip] | None) -> str | None:
    key = (answer.etag, tuple(chip.name for chip in devices or ()))
    known = _ESTIMATES.get(key)
    if known is not None:
        return known
    work = works_from_json(answer.work)
    if work is None:
        return None
    value = header_value(*work, devices)
    if len(_ESTIMATES) >= _ESTIMATES_MAX:
        del _ESTIMATES[next(iter(_ESTIMATES))]  # the oldest
    _ESTIMATES[key] = value
    return value


def artifact_response(
    answer: Served | Pending, request: Request, devices: list[Chip] | None = None
) -> Response:
    """200 with the zip (304 when If-None-Match names it), or 202 with a job still running."""
    if isinstance(answer, Pending):
        job = answer.job
        return JSONResponse(
            job.public(), status_code=202, headers={"Location": f"/v1/jobs/{job.id}"}
        )
    request.state.op = answer.op
    request.state.cache = "miss" if answer.built else "hit"
    headers = {
        "ETag": answer.etag,
        "X-Cache": request.state.cache,
        "Cache-Control": "no-cache",  # revalidate with If-None-Match; the ETag is the content
    }
    if answer.preflight is not None:
        headers[PREFLIGHT_HEADER] = answer.preflight
    if (estimate := _estimate(answer, devices)) is not None:
        headers[ESTIMATE_HEADER] = estimate
    if matches(request.headers.get("if-none-match"), answer.etag):
        if answer.file is not None:
            answer.file.close()
        return Response(status_code=304, headers=headers)
    headers["Content-Disposition"] = f'attachment; filename="{answer.filename}"'
    if answer.content is not None:
        return Response(answer.content, media_type=ZIP, headers=headers)
    assert answer.file is not None
    headers["Content-Length"] = str(answer.size)
    return StreamingResponse(_chunks(answer.file), media_type=ZIP, headers=headers)


async def _chunks(f):
    try:
        while chunk := await anyio.to_thread.run_sync(f.read, _CHUNK):
            yield chunk
    finally:
        f.close()
