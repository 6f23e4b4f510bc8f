"""What each client operation does, as generators that yield HTTP calls and sleeps.

Written once, driven by either the sync or the async client (see `client.py`): a flow yields a
`Call` and is sent back the `httpx.Response`, or yields a `Sleep` and is sent back None.

A job the service accepted can vanish: its broker restarted without its data, or it finished
longer ago than the service keeps jobs. Since a job's id is its request's cache key, the same
request submitted again is the same job (finished at once when the artifact is still stored),
so waiting and downloading submit it again (`Resubmit`) instead of failing on the 404.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.client.errors import error_from_response
from app.core.digest import canonical, file_digest, tensor_digest

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
_UPLOAD_CHUNK = 4 << 20
# Times one wait (or download) submits a vanished job again before giving up on it: a job that
# keeps vanishing has a broker that keeps losing its data, which no client can mend.
MAX_RESUBMITS = 3
MAX_PART_RETRIES = 5  # parts of one upload sent again after a dropped connection


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
Resubmit = Callable[[], Flow]  # submits a job's request again; returns the job


def _call(call: Call) -> Generator[Call | Sleep, httpx.Response | None, httpx.Response]:
    """Yields `call` and returns its response (a Call is always answered with one)."""
    response = yield call
    assert response is not None
    return response


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
    present = yield from _call(Call("HEAD", f"/v1/blobs/{digest}", ok=(200, 404)))
    if present.status_code == 200:
        return digest
    headers = {"content-type": "application/octet-stream"}
    answer = yield from _call(
        Call("POST", "/v1/blobs", content=_npy_stream(array), headers=headers, ok=(200, 201))
    )
    returned = answer.json()["digest"]
    if returned != digest:
        raise RuntimeError(f"the service stored {returned}, expected {digest}")
    return digest


def _file_part(path: Path, offset: int, length: int) -> Callable[[], Iterator[bytes]]:
    """`length` bytes of a file from `offset`, streamed (a retry reads them again)."""

    def chunks() -> Iterator[bytes]:
        with open(path, "rb") as f:
            f.seek(offset)
            left = length
            while left > 0 and (block := f.read(min(_UPLOAD_CHUNK, left))):
                left -= len(block)
                yield block

    return chunks


def upload_file(
    path: Path, digest: str, progress: Callable[[int, int], None] | None = None
) -> Flow:
    """A whole file through the resumable protocol (docs/uploads.md), unless the service has
    it: start, parts from where the service says it stands, finish. A part that fails in
    transit is sent again from the offset the service reports. Returns the stored blob."""
    size = path.stat().st_size
    started = yield from _call(
        Call("POST", "/v1/blobs/uploads", json={"digest": digest, "bytes": size}, ok=(200, 201))
    )
    upload = started.json()
    if upload["stored"]:
        return upload["blob"]
    where, failures = f"/v1/blobs/uploads/{upload['id']}", 0
    while upload["received"] < size:
        offset = upload["received"]
        length = min(upload["part_bytes"], size - offset)
        try:
            answer = yield from _call(
                Call(
                    "PUT",
                    where,
                    params={"offset": offset},
                    content=_file_part(path, offset, length),
                    headers={
                        "content-type": "application/octet-stream",
                        "content-length": str(length),
                    },
                )
            )
        except httpx.TransportError:
            failures += 1
            if failures > MAX_PART_RETRIES:
                raise
            upload = (yield from _call(Call("GET", where))).json()  # where to resume
            continue
        upload = answer.json()
        if progress is not None:
            progress(upload["received"], size)
    return (yield from _call(Call("POST", f"{where}/finish"))).json()["blob"]


CHECKPOINT_SUFFIXES = (".json", ".safetensors")  # what a kit reads from a checkpoint folder


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """The files of a checkpoint folder a kit reads, by name."""
    return {
        p.name: p
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.suffix in CHECKPOINT_SUFFIXES
    }


def compile_model(
    folder: Path,
    save_to: Path | None,
    poll: float,
    progress: Callable[[str, int, int], None] | None,
    **options: Any,
) -> Flow:
    """POST /v1/models: the folder's config, safetensors and tokenizer files uploaded unless the
    service has them (`progress(file name, bytes sent, its size)`), the kit built as a job and
    fetched."""
    files = {}
    for name, path in checkpoint_files(folder).items():
        report = None if progress is None else (lambda s, t, n=name: progress(n, s, t))
        files[name] = (yield from upload_file(path, file_digest(path), report))["digest"]
    if not files:
        raise ValueError(f"{folder}: no config.json or safetensors files")
    body = {"files": files, **{k: v for k, v in options.items() if v is not None}}

    def again() -> Flow:
        return (yield from _call(Call("POST", "/v1/models", json=body, ok=(200, 202)))).json()

    job = yield from wait((yield from again())["id"], poll, None, None, again)
    return (yield from artifact(job, save_to, again, poll))


def checkpoint_reference(
    checkpoint: str | Path,
    layers: int | str,
    config: str | os.PathLike[str] | Mapping[str, Any] | None,
) -> Flow:
    """The request's `checkpoint` for a checkpoint on this machine (model.safetensors, its
    index.json of shards, or their folder; config.json beside it unless given): its files
    uploaded once, the same reference the CLI and manifests resolve locally."""
    path = Path(checkpoint)
    folder = path if path.is_dir() else path.parent
    if path.is_dir():
        index = path / "model.safetensors.index.json"
        path = index if index.exists() else path / "model.safetensors"
    files = [path]
    if path.name.endswith(".json"):
        weight_map = json.loads(path.read_text())["weight_map"]
        files = [path.parent / shard for shard in sorted(set(weight_map.values()))]
    digests = []
    for file in files:  # through the resumable protocol, unless the service has the file
        digests.append((yield from upload_file(file, file_digest(file)))["digest"])
    if isinstance(config, Mapping):
        settings = dict(config)
    else:
        settings = json.loads(Path(config or folder / "config.json").read_text())
    key = "layers" if isinstance(layers, str) else "layer"
    return {
        "blob": digests[0] if len(digests) == 1 else digests,
        "config": settings,
        key: layers,
    }


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


def check_graph_weights(graph: Mapping[str, Any], names) -> None:
    """Weights of a graph are named `<node>.<weight>` after one of its nodes."""
    ids = {n["id"] for n in graph["nodes"]}
    for key in names:
        node, _, weight = key.partition(".")
        if node not in ids or not weight:
            raise ValueError(f"weight {key!r}: name it <node>.<weight> after a node of the graph")


def graph_body(graph: Mapping[str, Any], digests: Mapping[str, str], **options: Any) -> dict:
    """A graph request: `graph` (inputs, nodes, outputs) with each `<node>.<weight>` digest
    placed on its node."""
    check_graph_weights(graph, digests)
    body = {**graph, "nodes": [dict(n) for n in graph["nodes"]]}
    by_id = {n["id"]: n for n in body["nodes"]}
    for key, digest in digests.items():
        node, _, weight = key.partition(".")
        by_id[node]["weights"] = {**by_id[node].get("weights", {}), weight: digest}
    body.update({k: v for k, v in options.items() if v is not None})
    return body


def compile(
    op: str, params: Mapping[str, Any], weights, save_to: Path | None, poll: float, **options
) -> Flow:
    """POST /v1/kernels; a 202 (a compile that outlived the server's wait) is followed as a job."""
    body = request_body(op, params, (yield from upload_all(weights)), **options)
    return (yield from answer_or_job("/v1/kernels", body, save_to, poll, weights))


def compile_graph(
    graph: Mapping[str, Any], weights, save_to: Path | None, poll: float, **options
) -> Flow:
    """POST /v1/graphs, the weights uploaded first (by `<node>.<weight>`)."""
    check_graph_weights(graph, weights or {})
    body = graph_body(graph, (yield from upload_all(weights)), **options)
    return (yield from answer_or_job("/v1/graphs", body, save_to, poll, weights))


def compile_onnx(model: Path, save_to: Path | None, poll: float, **options: Any) -> Flow:
    """POST /v1/onnx: the model and the external-data files it names uploaded (resumable,
    unless the service has them), the import answered (or, a compile, followed as a job)."""
    from app.onnx.reader import local_files  # reads the model: only those who import one need it

    files = {}
    for name, path in local_files(model).items():
        files[name] = (yield from upload_file(path, file_digest(path)))["digest"]
    body = {"files": files, "model": model.name}
    body.update({k: v for k, v in options.items() if v is not None})

    def again() -> Flow:
        return (yield from _call(Call("POST", "/v1/onnx", json=body, ok=(202,)))).json()

    answer = yield from _call(Call("POST", "/v1/onnx", json=body, ok=(200, 202), save_to=save_to))
    if answer.status_code == 200:
        return save_to if save_to is not None else answer.content
    job = yield from wait(answer.json()["id"], poll, None, None, again)
    return (yield from artifact(job, save_to, again, poll))


def answer_or_job(
    path: str,
    body: dict,
    save_to: Path | None,
    poll: float,
    weights: Mapping[str, np.ndarray] | None = None,
) -> Flow:
    """The answer to `body`, or (202: a compile that outlived the service's wait) its job's."""
    answer = yield from _call(Call("POST", path, json=body, ok=(200, 202), save_to=save_to))
    if answer.status_code == 200:
        return save_to if save_to is not None else answer.content
    again = resubmission(body, weights)  # POST /v1/jobs takes kernel and graph bodies alike
    job = yield from wait(answer.json()["id"], poll, None, None, again)
    return (yield from artifact(job, save_to, again, poll))


def submit(bodies: list[dict]) -> Flow:
    payload = bodies[0] if len(bodies) == 1 else {"kernels": bodies}
    answer = yield from _call(Call("POST", "/v1/jobs", json=payload, ok=(200, 201, 202)))
    return answer.json()


def resubmission(body: dict, weights: Mapping[str, np.ndarray] | None = None) -> Resubmit:
    """Submit `body` (a kernel or graph request, weights by digest) again, uploading `weights`
    first if the service no longer has them (it keeps uploads in a bounded store)."""

    def again() -> Flow:
        yield from upload_all(weights)
        return (yield from submit([body]))

    return again


def record_resubmission(request: Mapping[str, Any]) -> Resubmit:
    """Submit again the request a job record shows: a model kit's and a device check's to their
    own routes (their records hold their bodies' fields), a kernel's or graph's to /v1/jobs."""
    kind = request.get("kind")
    if kind == "model":
        path, body = "/v1/models", {"files": request["files"], **request.get("options", {})}
    elif kind == "device_check":
        path = "/v1/device-checks"
        body = {
            "kit": request["kit"],
            "device": request["device"],
            "prompt_ids": request.get("prompt"),
            "max_new_tokens": request["max_new_tokens"],
        }
    else:
        return resubmission(body_of(request))

    def again() -> Flow:
        return (yield from _call(Call("POST", path, json=body, ok=(200, 202)))).json()

    return again


def body_of(request: Mapping[str, Any]) -> dict:
    """The request body that asks for what a job record shows as its `request` (weights by
    digest, options with their defaults filled in): the same request, so the same job."""
    digests = {name: w["digest"] for name, w in request.get("weights", {}).items()}
    options = {
        k: request.get(k)
        for k in (
            "format",
            "target",
            "name",
            "verify",
            "preflight",
            "quantize",
            "max_quantization_error",
            "placement",
            "architectures",
        )
    }
    if request.get("kind", request["op"]) == "graph":  # an older service names it by op only
        return graph_body(request["params"], digests, **options)
    return request_body(request["op"], request["params"], digests, **options)


def get_job(job_id: str) -> Flow:
    return (yield from _call(Call("GET", f"/v1/jobs/{job_id}"))).json()


def wait(
    job_id: str,
    poll: float,
    timeout: float | None,
    progress: Callable[[dict], None] | None,
    resubmit: Resubmit | None = None,
) -> Flow:
    """Poll until the job ends; `progress` is called whenever its state changes. A job that
    vanishes (404) is submitted again with `resubmit` when there is one."""
    waited, last, resubmits = 0.0, None, 0
    while True:
        answer = yield from _call(Call("GET", f"/v1/jobs/{job_id}", ok=(200, 404)))
        if answer.status_code == 404:
            if resubmit is None or resubmits >= MAX_RESUBMITS:
                raise error_from_response(answer)
            resubmits += 1
            job = yield from resubmit()
            job_id = job["id"]
        else:
            job = answer.json()
        if progress is not None and job.get("state") != last:
            progress(job)
        last = job.get("state")
        if last in TERMINAL:
            return job
        if timeout is not None and waited >= timeout:
            raise TimeoutError(f"job {job_id} still {last} after {timeout:g} s")
        yield Sleep(poll)
        waited += poll


def artifact(
    job: dict, save_to: Path | None, resubmit: Resubmit | None = None, poll: float = 0.5
) -> Flow:
    """The finished job's zip. A job (or artifact) gone by the time it is fetched is submitted
    again with `resubmit`, waited for and fetched once more."""
    resubmits = 0
    while True:
        if job.get("state") != "succeeded":
            raise RuntimeError(
                f"job {job.get('id')} {job.get('state')}: {job.get('error') or 'no artifact'}"
            )
        retry = resubmit is not None and resubmits < MAX_RESUBMITS
        answer = yield from _call(
            Call(
                "GET",
                f"/v1/jobs/{job['id']}/artifact",
                save_to=save_to,
                ok=(200, 404) if retry else (200,),
            )
        )
        if answer.status_code == 200:
            return save_to if save_to is not None else answer.content
        assert resubmit is not None
        resubmits += 1
        submitted = yield from resubmit()
        job = yield from wait(submitted["id"], poll, None, None, resubmit)


def simple(
    method: str, path: str, params: Mapping[str, Any] | None = None, ok=(200,), json: Any = None
) -> Flow:
    answer = yield from _call(Call(method, path, params=params, json=json, ok=ok))
    return answer.json() if answer.content else None
