"""What each client operation does, as generators that yield HTTP calls and sleeps.

Written once, driven by either the sync or the async client (see `client.py`): a flow yields a
`Call` and is sent back the `httpx.Response`, or yields a `Sleep` and is sent back None.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.digest import canonical, tensor_digest

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
_UPLOAD_CHUNK = 4 << 20


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    content: Callable[[], Iterator[bytes]] | None = None  # a factory, so a retry can resend it
    headers: Mapping[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = (200,)  # statuses handed back to the flow; others raise
    save_to: Path | None = None  # stream the body into this file (written atomically)


@dataclass(frozen=True)
class Sleep:
    seconds: float


Flow = Generator[Call | Sleep, httpx.Response | None, Any]


def _npy_stream(array: np.ndarray) -> Callable[[], Iterator[bytes]]:
    """The tensor as a .npy file, streamed from the array's own memory (no full copy)."""
    array = canonical(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    flat = array.reshape(-1).view(np.uint8)

    def chunks() -> Iterator[bytes]:
        yield header.getvalue()
        for start in range(0, flat.size, _UPLOAD_CHUNK):
            yield flat[start : start + _UPLOAD_CHUNK].tobytes()

    return chunks


def upload(array: np.ndarray) -> Flow:
    """Upload a tensor unless the service already has it; return its digest."""
    digest = tensor_digest(array)
    present = yield Call("HEAD", f"/v1/blobs/{digest}", ok=(200, 404))
    if present.status_code == 200:
        return digest
    headers = {"content-type": "application/octet-stream"}
    answer = yield Call(
        "POST", "/v1/blobs", content=_npy_stream(array), headers=headers, ok=(200, 201)
    )
    returned = answer.json()["digest"]
    if returned != digest:
        raise RuntimeError(f"the service stored {returned}, expected {digest}")
    return digest


def request_body(
    op: str, params: Mapping[str, Any], digests: Mapping[str, str], **options: Any
) -> dict:
    body = {"op": op, **params, "weights": dict(digests)}
    body.update({k: v for k, v in options.items() if v is not None})
    return body


def upload_all(weights: Mapping[str, np.ndarray] | None) -> Flow:
    digests = {}
    for name, array in (weights or {}).items():
        digests[name] = yield from upload(np.asarray(array))
    return digests


def compile(
    op: str, params: Mapping[str, Any], weights, save_to: Path | None, poll: float, **options
) -> Flow:
    """POST /v1/kernels; a 202 (a compile that outlived the server's wait) is followed as a job."""
    body = request_body(op, params, (yield from upload_all(weights)), **options)
    answer = yield Call("POST", "/v1/kernels", json=body, ok=(200, 202), save_to=save_to)
    if answer.status_code == 200:
        return save_to if save_to is not None else answer.content
    job = yield from wait(answer.json()["id"], poll, None, None)
    return (yield from artifact(job, save_to))


def submit(bodies: list[dict]) -> Flow:
    payload = bodies[0] if len(bodies) == 1 else {"kernels": bodies}
    answer = yield Call("POST", "/v1/jobs", json=payload, ok=(200, 201, 202))
    return answer.json()


def get_job(job_id: str) -> Flow:
    return (yield Call("GET", f"/v1/jobs/{job_id}")).json()


def wait(
    job_id: str, poll: float, timeout: float | None, progress: Callable[[dict], None] | None
) -> Flow:
    """Poll until the job ends; `progress` is called whenever its state changes."""
    waited, last = 0.0, None
    while True:
        job = yield from get_job(job_id)
        if progress is not None and job.get("state") != last:
            progress(job)
        last = job.get("state")
        if last in TERMINAL:
            return job
        if timeout is not None and waited >= timeout:
            raise TimeoutError(f"job {job_id} still {last} after {timeout:g} s")
        yield Sleep(poll)
        waited += poll


def artifact(job: dict, save_to: Path | None) -> Flow:
    if job.get("state") != "succeeded":
        raise RuntimeError(
            f"job {job.get('id')} {job.get('state')}: {job.get('error') or 'no artifact'}"
        )
    answer = yield Call("GET", f"/v1/jobs/{job['id']}/artifact", save_to=save_to)
    return save_to if save_to is not None else answer.content


def simple(method: str, path: str, params: Mapping[str, Any] | None = None, ok=(200,)) -> Flow:
    answer = yield Call(method, path, params=params, ok=ok)
    return answer.json() if answer.content else None
