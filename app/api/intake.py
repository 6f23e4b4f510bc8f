"""Reads kernel requests off the wire (JSON or multipart) into `KernelRequest`s.

Content negotiation, size limits, JSON parsing and schema validation happen here so the routers
stay a page long; every failure names the field at fault. A JSON kernel request is parsed only
when the service asks for it (`JsonIncoming.request`): a request seen before with exactly the
same bytes is answered from the memo without parsing.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic_core
from pydantic import ValidationError
from starlette.requests import Request

from app.api.checkpoint_refs import FIELD as CHECKPOINT
from app.api.checkpoint_refs import with_checkpoint
from app.api.context import Services
from app.api.problems import Problem, from_field_error, from_validation_errors
from app.api.weight_sources import (
    check_part_names,
    inline_tensor,
    part_tensor,
    raw_defaults,
    stored_tensor,
)
from app.cache.memo import Fingerprint, fingerprint_of
from app.checkpoints import CHECKPOINT_OPS, check_role
from app.errors import FieldError, RequestError
from app.graphs.spec import GRAPH_OP
from app.kernels import get_op
from app.request import KernelRequest, WeightRef
from app.schemas.wire import (
    KERNEL_REQUEST_ADAPTER,
    REQUEST_MODELS,
    GraphRequest,
    KernelOptions,
    RawWeight,
    RequestOptions,
    params_of,
)
from app.uploads.spool import (
    MultipartBody,
    MultipartLimits,
    declared_length,
    read_small_body,
    spool_multipart,
)

JSON_TYPES = ("application/json",)
ANY = "*"  # the `path_op` of a body that may hold a kernel or a graph (POST /v1/jobs)
MULTIPART = "multipart/form-data"
# Members of the weight-value union, as pydantic names them in error locations.
_WEIGHT_UNION_TAGS = {"constrained-str", "list[any]", "RawWeight"}


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def unsupported_media(got: str, accepted: list[str]) -> Problem:
    return Problem(
        415,
        f"Content-Type {got or '(none)'} is not accepted here; send {' or '.join(accepted)}",
        title="Unsupported media type",
        accepted=accepted,
    )


def parse_json(raw: bytes, what: str) -> Any:
    try:
        return orjson.loads(raw)  # a 90 KB body of weights: 1.5x jiter's speed, 7x json's
    except ValueError:
        pass
    try:  # NaN / Infinity literals are not JSON, but a weight holding them deserves a 422
        return pydantic_core.from_json(raw, allow_inf_nan=True)
    except ValueError as exc:
        raise Problem(400, f"{what} is not valid JSON: {exc}", title="Malformed JSON") from None


def _validate(data: Any, path_op: str | None) -> KernelOptions:
    if not isinstance(data, dict):
        raise Problem(422, "the request body must be a JSON object", title="Invalid request")
    if path_op is not None:
        body_op = data.setdefault("op", path_op)
        if body_op != path_op:
            raise Problem(
                422,
                f"op {body_op!r} in the body contradicts {path_op!r} in the path",
                title="Invalid request",
                field="op",
            )
    op = data.get("op")
    if isinstance(op, str):
        get_op(op)  # an unknown op is a 404 naming the catalog
    try:
        if path_op is not None:
            return REQUEST_MODELS[path_op].model_validate(data)
        return KERNEL_REQUEST_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise validation_problem(exc.errors(), skip=0 if path_op else 1) from None


def validation_problem(errors: list[Any], skip: int) -> Problem:
    """One error per field: a weight value that matches no union member is one message."""
    merged: list[dict[str, Any]] = []
    seen_weights: set[tuple] = set()
    for err in errors:
        loc = tuple(err["loc"])[skip:] if err["loc"] and err["type"] != "union_tag_invalid" else ()
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = ("op",)
        if loc and loc[-1] in _WEIGHT_UNION_TAGS:
            loc = loc[:-1]
            if loc in seen_weights:
                continue
            seen_weights.add(loc)
            err = {
                **err,
                "msg": "expected a blob digest (sha256:<64 hex>), a nested list of numbers, "
                "or {dtype, shape} describing a raw file part",
            }
        merged.append({**err, "loc": loc})
    return from_validation_errors(merged)


class JsonIncoming:
    """A JSON kernel request: its exact bytes now, the parsed request when asked for."""

    def __init__(self, raw: bytes, svc: Services, path_op: str | None, bypass: bool):
        self.raw, self.svc, self.path_op, self.bypass = raw, svc, path_op, bypass
        self.fingerprint: Fingerprint | None = None if bypass else fingerprint_of(path_op, raw)

    async def request(self) -> KernelRequest:
        return await request_from_json(self.raw, self.svc, self.path_op, self.bypass)


class ParsedIncoming:
    """A request parsed already (a multipart one: its parts had to be read anyway)."""

    fingerprint: Fingerprint | None = None

    def __init__(self, request: KernelRequest):
        self._request = request

    async def request(self) -> KernelRequest:
        return self._request


async def request_from_json(
    raw: bytes, svc: Services, path_op: str | None, bypass: bool = False
) -> KernelRequest:
    """`path_op` "graph" reads a graph request; else a kernel request (op from the path or body)."""
    data = parse_json(raw, "the body")
    return await _from_data(data, None, svc, path_op, bypass)


async def _from_data(
    data: Any, body: MultipartBody | None, svc: Services, path_op: str | None, bypass: bool
) -> KernelRequest:
    """The checked request of a body (its options checked before any weight is read), then
    with its weights: inline, from the blob store, or from the body's file parts."""
    if path_op == ANY:  # a job: a graph has nodes, a kernel an op
        path_op = GRAPH_OP if isinstance(data, dict) and "nodes" in data else None
    if path_op == GRAPH_OP:
        wire: GraphRequest | KernelOptions = _validate_graph(data, svc.settings.max_graph_nodes)
    else:
        if isinstance(data, dict) and data.get(CHECKPOINT) is not None:
            op = path_op or data.get("op")
            if isinstance(op, str):
                get_op(op)  # an unknown op is a 404 naming the catalog
                data = await asyncio.to_thread(with_checkpoint, data, op, svc.blobs)
        wire = _validate(data, path_op)
    request = _checked(wire, bypass)
    parts = body.files if body is not None else {}
    if isinstance(wire, GraphRequest):  # the request's kind is GRAPH
        slots = _graph_slots(wire, parts)
    else:
        slots = _kernel_slots(request, wire.weights, parts)
    weights = await _weights(slots, parts, svc)
    _check_roles(slots, weights)
    return request.with_weights(weights)


def _check_roles(slots: dict[str, _Slot], weights: dict[str, WeightRef]) -> None:
    """A checkpoint tensor named for a weight (`sha256:<file>#<tensor>`) must hold that
    weight's role: a swapped tensor of the same size would build a wrong kernel silently (one
    of another size is refused by the build, naming the shapes, which says more)."""
    for key, slot in slots.items():
        expected = slot.defaults[1]
        if slot.role is None or not (isinstance(slot.value, str) and "#" in slot.value):
            continue
        if expected is not None and math.prod(weights[key].shape) != math.prod(expected):
            continue
        check_role(slot.field, slot.role, slot.value.split("#", 1)[1])


@contextlib.asynccontextmanager
async def incoming_kernel(
    request: Request, svc: Services, path_op: str | None, bypass: bool
) -> AsyncIterator[JsonIncoming | ParsedIncoming]:
    """The kernel (or, with `path_op` "graph", graph) request of an HTTP request; spooled file
    parts are removed when the block ends (a job has moved its parts into the blob store)."""
    if path_op not in (None, GRAPH_OP, ANY):
        get_op(path_op)
    kind = media_type(request)
    settings = svc.settings
    if kind in JSON_TYPES:
        yield JsonIncoming(
            await read_small_body(request, settings.max_json_bytes), svc, path_op, bypass
        )
        return
    if kind != MULTIPART:
        raise unsupported_media(kind, ["application/json", MULTIPART])
    async with multipart_with_spec(request, svc) as (data, body):
        yield ParsedIncoming(await _from_data(data, body, svc, path_op, bypass))


@contextlib.asynccontextmanager
async def multipart_with_spec(
    request: Request, svc: Services
) -> AsyncIterator[tuple[Any, MultipartBody]]:
    """A multipart body spooled within the limits: its `spec` part parsed as JSON, its file parts
    on disk (removed when the block ends)."""
    settings = svc.settings
    needed = declared_length(request)
    await svc.room_for_upload(needed, settings.max_body_bytes)
    with svc.upload_faults(needed):
        body = await spool_multipart(
            request, MultipartLimits.of(settings), {"spec"}, svc.spool_path
        )
    try:
        if "spec" not in body.fields:
            raise Problem(
                422,
                "a multipart request needs a `spec` part holding the JSON request",
                title="Missing spec part",
                field="spec",
            )
        yield parse_json(body.fields["spec"], "the spec part"), body
    finally:
        body.cleanup()


def _validate_graph(data: Any, max_nodes: int) -> GraphRequest:
    if not isinstance(data, dict):
        raise Problem(422, "the request body must be a JSON object", title="Invalid request")
    try:
        wire = GraphRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc.errors(), skip=0) from None
    if len(wire.nodes) > max_nodes:
        raise RequestError(
            "nodes",
            f"{len(wire.nodes)} nodes, over the limit of {max_nodes} per "
            "graph (ANE_MAX_GRAPH_NODES)",
            limit=max_nodes,
        )
    return wire


@dataclass(frozen=True)
class _Slot:
    """Where one weight of a request is described: its key in the request, its path in the
    body, its value there (None: only a file part gives it) and how to read raw bytes."""

    key: str
    field: str
    value: Any
    defaults: tuple[str | None, tuple[int, ...] | None] = (None, None)
    # a block op's weight name (a Hugging Face role): a checkpoint tensor must hold that role
    role: str | None = None


def _checked(wire: GraphRequest | KernelOptions, bypass: bool) -> KernelRequest:
    """The request a validated wire body asks for, checked (before any weight is read), still
    without its weights."""
    options: dict[str, Any] = {k: getattr(wire, k) for k in RequestOptions.model_fields}
    options["bypass_cache"] = bypass or options["bypass_cache"]
    if isinstance(wire, GraphRequest):
        return KernelRequest.create(graph=wire.graph(), passes=wire.passes, **options)
    return KernelRequest.create(
        wire.op,
        params_of(wire),
        quantize=wire.quantize,
        functions=wire.functions,
        **options,
    )


def _kernel_slots(
    request: KernelRequest, given: dict[str, Any], parts: dict[str, Any]
) -> dict[str, _Slot]:
    """A catalog op's weights: `weights.<name>` in the body, or a file part `<name>`."""
    if parts:
        check_part_names(request, list(parts))
    roles = request.op in CHECKPOINT_OPS  # weights named for Hugging Face tensor roles
    return {
        name: _Slot(
            name,
            f"weights.{name}",
            given.get(name),
            raw_defaults(request, name),
            name if roles else None,
        )
        for name in sorted({*given, *parts})
    }


def _graph_slots(wire: GraphRequest, parts: dict[str, Any]) -> dict[str, _Slot]:
    """A graph's weights: `nodes[i].weights.<name>` in the body, or a file part
    `<node>.<name>`."""
    index = {node.id: i for i, node in enumerate(wire.nodes)}
    slots = {}
    for i, node in enumerate(wire.nodes):
        for w, value in node.weights.items():
            slots[f"{node.id}.{w}"] = _Slot(f"{node.id}.{w}", f"nodes[{i}].weights.{w}", value)
    for name in parts:
        node_id, dot, w = name.partition(".")
        if not dot or node_id not in index:
            raise RequestError(
                name,
                f"unexpected part {name!r}: a graph's file parts are named <node>.<weight>",
                title="Unexpected multipart part",
            )
        slots.setdefault(name, _Slot(name, f"nodes[{index[node_id]}].weights.{w}", None))
    return slots


async def _weights(
    slots: dict[str, _Slot], parts: dict[str, Any], svc: Services
) -> dict[str, WeightRef]:
    out: dict[str, WeightRef] = {}
    for key, slot in slots.items():
        part, value = parts.get(key), slot.value
        if part is not None:
            if value is not None and not isinstance(value, RawWeight):
                raise RequestError(
                    slot.field,
                    f"{slot.field} is given twice: in the spec and as a file part",
                    title="Invalid weight",
                )
            raw = value if isinstance(value, RawWeight) else None
            out[key] = await asyncio.to_thread(part_tensor, slot.field, part, raw, slot.defaults)
        elif isinstance(value, RawWeight):
            raise RequestError(
                slot.field,
                f"{slot.field} describes a raw file part, but the request has no multipart part "
                f"named {key!r}",
                title="Invalid weight",
            )
        elif isinstance(value, list):
            out[key] = inline_tensor(slot.field, value)
        elif value is not None:
            out[key] = await asyncio.to_thread(stored_tensor, slot.field, value, svc.blobs)
    return out


async def job_requests(
    request: Request, svc: Services, max_batch: int
) -> tuple[list[KernelRequest], bool]:
    """The kernel requests of a /v1/jobs body (one, or a batch) and whether it was a batch; their
    weights are kept in the blob store, since the jobs outlive the request
    (`BlobStore.keep_weights`)."""
    requests, batch = await _job_requests(request, svc, max_batch)
    kept = [await asyncio.to_thread(svc.blobs.keep_weights, r) for r in requests]
    return kept, batch


async def _job_requests(
    request: Request, svc: Services, max_batch: int
) -> tuple[list[KernelRequest], bool]:
    kind = media_type(request)
    if kind == MULTIPART:  # one kernel or graph with its weights as file parts
        async with incoming_kernel(request, svc, ANY, False) as incoming:
            one = await incoming.request()
            # moved into the store before the block removes the request's spool files
            return [await asyncio.to_thread(svc.blobs.keep_weights, one)], False
    if kind not in JSON_TYPES:
        raise unsupported_media(kind, ["application/json", MULTIPART])
    raw = await read_small_body(request, svc.settings.max_json_bytes)
    data = parse_json(raw, "the body")
    if not (isinstance(data, dict) and "kernels" in data):
        return [await _from_data(data, None, svc, ANY, False)], False
    kernels = data["kernels"]
    if (
        set(data) != {"kernels"}
        or not isinstance(kernels, list)
        or not 1 <= len(kernels) <= max_batch
    ):
        raise Problem(
            422,
            f'a batch is {{"kernels": [...]}} with 1 to {max_batch} kernel requests',
            title="Invalid batch",
            field="kernels",
        )
    requests = []
    for i, item in enumerate(kernels):
        try:
            requests.append(await _from_data(item, None, svc, ANY, False))
        except (FieldError, Problem) as exc:
            problem = from_field_error(exc) if isinstance(exc, FieldError) else exc
            field = f"kernels.{i}" + (f".{problem.field}" if problem.field else "")
            raise Problem(
                problem.status, f"kernels[{i}]: {problem.detail}", title=problem.title, field=field
            ) from None
    return requests, True
