"""Python clients for the service: `Client` (sync) and `AsyncClient`, one API written once.

    from app.client import Client
    with Client("http://127.0.0.1:8000") as c:
        zip_bytes = c.compile("conv", {"in_channels": 64, "out_channels": 64, "spatial": 16},
                              {"weight": w})
        job = c.submit("conv", {...}, {"weight": w}, format="mlmodelc")
        job.wait(progress=print).download("conv.zip")

Every method of `AsyncClient` and `AsyncJob` returns an awaitable. Weights are uploaded once
(`HEAD /v1/blobs/{digest}` first) and referenced by digest. 429 and 503 answers are retried,
honouring `Retry-After`, until `max_retry_wait` seconds have been spent waiting.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.client import flows
from app.client.errors import error_from_response
from app.client.flows import Call, Sleep
from app.core.files import atomic_file
from app.language.targets import DEFAULT_TARGET

RETRY_STATUSES = (429, 503)
DEFAULT_RETRY_AFTER = 1.0


def _listed(names: Sequence[str] | None) -> list[str] | None:
    """Architectures as the body lists them (a bare string is one name, not its letters)."""
    if names is None:
        return None
    return [names] if isinstance(names, str) else list(names)


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", DEFAULT_RETRY_AFTER)))
    except ValueError:  # an HTTP date: not worth parsing for a short back-off
        return DEFAULT_RETRY_AFTER


class _API(abc.ABC):
    """The operations; `_drive` (sync or async) runs each flow."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_retry_wait: float = 60.0,
        poll_interval: float = 0.5,
    ):
        self.base_url = (
            base_url or os.environ.get("ANE_SERVER") or "http://127.0.0.1:8000"
        ).rstrip("/")
        key = api_key or os.environ.get("ANE_API_KEY")
        self.headers = {"authorization": f"Bearer {key}"} if key else {}
        self.timeout, self.max_retry_wait, self.poll_interval = (
            timeout,
            max_retry_wait,
            poll_interval,
        )

    @abc.abstractmethod
    def _drive(self, flow: flows.Flow):
        """Run a flow to its end: a result (sync) or an awaitable of it (async)."""

    def _request(self, call: Call) -> httpx.Request:
        headers = {**self.headers, **call.headers}
        content = call.content() if call.content is not None else None
        return httpx.Request(
            call.method,
            self.base_url + call.path,
            params=call.params,
            json=call.json,
            content=content,
            headers=headers,
        )

    def _retry_delay(self, response: httpx.Response, waited: float) -> float | None:
        """Seconds to wait before retrying, or None when the answer is final."""
        if response.status_code not in RETRY_STATUSES:
            return None
        delay = _retry_after(response)
        return delay if waited + delay <= self.max_retry_wait else None

    # -- operations ---------------------------------------------------------------------------
    def compile(
        self,
        op: str,
        params: Mapping[str, Any],
        weights: Mapping[str, np.ndarray] | None = None,
        *,
        format: str = "mlpackage",
        target: str = DEFAULT_TARGET,
        name: str | None = None,
        verify: bool = False,
        bypass_cache: bool = False,
        save_to: str | os.PathLike | None = None,
        quantize: Mapping[str, Any] | None = None,
        max_quantization_error: float | None = None,
        placement: bool = False,
        functions: Mapping[str, Mapping[str, Any]] | None = None,
        preflight: str | None = None,
        checkpoint: Mapping[str, Any] | None = None,
        architectures: Sequence[str] | None = None,
    ):
        """The kernel's zip as bytes, or written to `save_to` (returning that path); `quantize`
        compresses its weight matrix (e.g. {"mode": "palettize", "nbits": 4}); `placement` adds
        Core ML's placement report to an mlmodelc, `architectures` compiles an aimodel for
        those chips (e.g. ["m4", "a18-pro"]), both on a macOS worker; `functions` builds
        several calls of the op into one package; `preflight="strict"` refuses an ANE preflight
        error; `checkpoint` takes the params and weights from a checkpoint
        (`checkpoint_reference`)."""
        options = {
            "format": format,
            "target": target,
            "name": name,
            "verify": verify or None,
            "bypass_cache": bypass_cache or None,
            "quantize": quantize,
            "max_quantization_error": max_quantization_error,
            "placement": placement or None,
            "functions": functions,
            "preflight": preflight,
            "checkpoint": checkpoint,
            "architectures": _listed(architectures),
        }
        path = Path(save_to) if save_to is not None else None
        return self._drive(flows.compile(op, params, weights, path, self.poll_interval, **options))

    def checkpoint_reference(
        self,
        checkpoint: str | os.PathLike,
        layers: int | str,
        *,
        config: str | os.PathLike | Mapping[str, Any] | None = None,
    ):
        """A checkpoint on this machine as a request's `checkpoint` (a layer as an int, a
        decoder_stack range as "0-15"): its safetensors file(s) uploaded unless the service has
        them, its config.json (beside it unless given) read."""
        return self._drive(flows.checkpoint_reference(Path(checkpoint), layers, config))

    def compile_graph(
        self,
        graph: Mapping[str, Any],
        weights: Mapping[str, np.ndarray] | None = None,
        *,
        format: str | None = None,
        target: str | None = None,
        name: str | None = None,
        verify: bool = False,
        bypass_cache: bool = False,
        passes: str | list[str] | dict[str, Any] | None = None,
        save_to: str | os.PathLike | None = None,
    ):
        """A graph's zip (one program): `graph` holds inputs, nodes and outputs, and may hold
        the request's own options (format, target, verify, passes, ...: the POST /v1/graphs
        body), which the arguments given here override; `weights` maps `<node>.<weight>` to
        arrays (uploaded unless the service has them)."""
        options = {
            "format": format,
            "target": target,
            "name": name,
            "verify": verify or None,
            "bypass_cache": bypass_cache or None,
            "passes": passes,
        }
        path = Path(save_to) if save_to is not None else None
        return self._drive(flows.compile_graph(graph, weights, path, self.poll_interval, **options))

    def submit_graph(
        self,
        graph: Mapping[str, Any],
        weights: Mapping[str, np.ndarray] | None = None,
        *,
        format: str | None = None,
        target: str | None = None,
        name: str | None = None,
        verify: bool = False,
        architectures: Sequence[str] | None = None,
        passes: str | list[str] | dict[str, Any] | None = None,
    ):
        """Queue a graph's build job; returns a Job (AsyncJob for the async client)."""
        options = {
            "format": format,
            "target": target,
            "name": name,
            "verify": verify or None,
            "architectures": _listed(architectures),
            "passes": passes,
        }
        return self._drive(self._submit_graph_flow(graph, weights, options))

    def _submit_graph_flow(self, graph, weights, options) -> flows.Flow:
        flows.check_graph_weights(graph, weights or {})
        body = flows.graph_body(graph, (yield from flows.upload_all(weights)), **options)
        return self._job((yield from flows.submit([body])), flows.resubmission(body, weights))

    def compile_model(
        self,
        checkpoint_dir: str | os.PathLike,
        *,
        save_to: str | os.PathLike | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        **options: Any,
    ):
        """A model kit of a Hugging Face checkpoint folder (its zip's bytes, or written to
        `save_to`), built by the service (POST /v1/models). Options as `ane-kernels model` names
        them: format, context, prefill, device, quantize, kv, verify, strict. Only files the service
        lacks are uploaded, in resumable parts; `progress(file, sent, size)` after each part."""
        path = Path(save_to) if save_to is not None else None
        return self._drive(
            flows.compile_model(Path(checkpoint_dir), path, self.poll_interval, progress, **options)
        )

    def compile_onnx(
        self,
        model: str | os.PathLike,
        *,
        shapes: Mapping[str, Sequence[int]] | None = None,
        io_dtype: str | None = None,
        format: str | None = None,
        target: str | None = None,
        name: str | None = None,
        verify: bool = False,
        preflight: str | None = None,
        bypass_cache: bool = False,
        passes: str | list[str] | dict[str, Any] | None = None,
        quantize: Mapping[str, Any] | None = None,
        max_quantization_error: float | None = None,
        save_to: str | os.PathLike | None = None,
    ):
        """An ONNX model imported into one program by the service (POST /v1/onnx): the model
        file and the external-data files it names are uploaded unless the service has them;
        `shapes` fixes dynamic input axes ({"input_ids": [1, 128]}); `passes` chooses the graph
        passes (docs/passes.md; the service's default when not given); `quantize` compresses
        the weight matrices (docs/quantization.md). The zip's bytes, or written to `save_to`
        (returning that path). Needs the `onnx` package here (to read which files the model
        names)."""
        options = {
            "shapes": {k: list(v) for k, v in shapes.items()} if shapes else None,
            "io_dtype": io_dtype,
            "format": format,
            "target": target,
            "name": name,
            "verify": verify or None,
            "preflight": preflight,
            "bypass_cache": bypass_cache or None,
            "passes": passes,
            "quantize": dict(quantize) if quantize is not None else None,
            "max_quantization_error": max_quantization_error,
        }
        path = Path(save_to) if save_to is not None else None
        return self._drive(flows.compile_onnx(Path(model), path, self.poll_interval, **options))

    def upload_file(
        self, path: str | os.PathLike, *, progress: Callable[[int, int], None] | None = None
    ):
        """Send a whole file (a checkpoint shard, a config) in resumable parts unless the
        service has it; returns the stored blob ({"digest", "dtype", "bytes", ...}).
        `progress(sent, total)` is called after each part."""
        path = Path(path)
        return self._drive(flows.upload_file(path, flows.file_digest(path), progress))

    def upload(self, array: np.ndarray):
        """Send a tensor unless the service has it already; returns `sha256:<hex>`."""
        return self._drive(flows.upload(array))

    def submit(
        self,
        op: str,
        params: Mapping[str, Any],
        weights: Mapping[str, np.ndarray] | None = None,
        *,
        format: str = "mlpackage",
        target: str = DEFAULT_TARGET,
        name: str | None = None,
        verify: bool = False,
        quantize: Mapping[str, Any] | None = None,
        max_quantization_error: float | None = None,
        placement: bool = False,
        functions: Mapping[str, Mapping[str, Any]] | None = None,
        preflight: str | None = None,
        checkpoint: Mapping[str, Any] | None = None,
        architectures: Sequence[str] | None = None,
    ):
        """Queue a build job; returns a Job (AsyncJob for the async client). Options as for
        `compile`."""
        options = {
            "format": format,
            "target": target,
            "name": name,
            "verify": verify or None,
            "quantize": quantize,
            "max_quantization_error": max_quantization_error,
            "placement": placement or None,
            "functions": functions,
            "preflight": preflight,
            "checkpoint": checkpoint,
            "architectures": _listed(architectures),
        }
        return self._drive(self._submit_flow(op, params, weights, options))

    def _submit_flow(self, op, params, weights, options) -> flows.Flow:
        body = flows.request_body(op, params, (yield from flows.upload_all(weights)), **options)
        return self._job((yield from flows.submit([body])), flows.resubmission(body, weights))

    def job(self, job_id: str):
        return self._drive(self._wrap(flows.get_job(job_id)))

    def jobs(self, state: str | None = None, limit: int = 50):
        params = {"limit": limit, **({"state": state} if state else {})}
        return self._drive(flows.simple("GET", "/v1/jobs", params))

    def cancel(self, job_id: str):
        return self._drive(flows.simple("DELETE", f"/v1/jobs/{job_id}", ok=(200, 202)))

    def ops(self):
        return self._drive(flows.simple("GET", "/v1/ops"))

    def info(self):
        return self._drive(flows.simple("GET", "/v1/info"))

    def workers(self):
        return self._drive(flows.simple("GET", "/v1/workers"))

    def devices(self):
        return self._drive(flows.simple("GET", "/v1/devices"))

    def plan(
        self,
        config: Mapping[str, Any],
        device: str | None = None,
        *,
        quantize: Mapping[str, Any] | None = None,
        context: int | None = None,
        prefill: int | None = None,
        prompt: int | None = None,
        kv: str = "io",
        path: str = "coreml",
        strict: bool = False,
    ):
        """The kit `compile_model` builds with the same options, from its config.json (a dict)
        alone: programs, and on `device` tokens per second with ranges, memory, what does not
        fit (POST /v1/plan). Defaults as `ane-kernels plan`'s; `prefill` is tokens per prefill
        call, `prompt` the prompt the prefill speed is predicted for."""
        body = {
            "config": dict(config),
            "device": device,
            "quantize": quantize,
            "context": context,
            "prefill": prefill,
            "prompt": prompt,
            "kv": kv,
            "path": path,
            "strict": strict,
        }
        return self._drive(flows.simple("POST", "/v1/plan", json=body))

    def _wrap(self, flow: flows.Flow) -> flows.Flow:
        return self._job((yield from flow))

    def _job(self, data: dict, resubmit: flows.Resubmit | None = None):
        return (AsyncJob if isinstance(self, AsyncClient) else Job)(self, data, resubmit)


class Job:
    """A build job on the service; `data` is its last known JSON.

    Should the service lose the job (404 after it accepted it: a broker restarted without its
    data), `wait` and `download` submit its request again: the request it was submitted with,
    weights uploaded again if need be, or else the request its record showed."""

    def __init__(self, client: _API, data: dict, resubmit: flows.Resubmit | None = None):
        self.client, self.data, self._resubmit = client, data, resubmit

    def _again(self) -> flows.Resubmit | None:
        if self._resubmit is not None:
            return self._resubmit
        request = self.data.get("request")
        return flows.record_resubmission(request) if request else None

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def state(self) -> str:
        return self.data.get("state", "queued")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, state={self.state!r})"

    def _update(self, flow: flows.Flow) -> flows.Flow:
        self.data = yield from flow
        return self

    def refresh(self):
        return self.client._drive(self._update(flows.get_job(self.id)))

    def wait(self, *, progress: Callable[[dict], None] | None = None, timeout: float | None = None):
        """Poll until succeeded, failed or cancelled; returns the job itself."""
        wait = flows.wait(self.id, self.client.poll_interval, timeout, progress, self._again())
        return self.client._drive(self._update(wait))

    def download(self, path: str | os.PathLike):
        artifact = flows.artifact(self.data, Path(path), self._again(), self.client.poll_interval)
        return self.client._drive(artifact)

    def cancel(self):
        return self.client._drive(
            self._update(flows.simple("DELETE", f"/v1/jobs/{self.id}", ok=(200, 202)))
        )


class AsyncJob(Job):
    """A Job whose methods return awaitables."""


class Client(_API):
    def __init__(self, base_url: str | None = None, **kwargs: Any):
        super().__init__(base_url, **kwargs)
        self._http = httpx.Client(timeout=self.timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call) -> httpx.Response:
        waited = 0.0
        while True:
            response = self._http.send(self._request(call), stream=call.save_to is not None)
            if response.status_code in call.ok:
                if call.save_to is not None and response.status_code == 200:
                    try:
                        with atomic_file(call.save_to) as out:
                            for chunk in response.iter_bytes(1 << 20):
                                out.write(chunk)
                    finally:
                        response.close()
                else:
                    response.read()
                return response
            response.read()
            delay = self._retry_delay(response, waited)
            if delay is None:
                raise error_from_response(response)
            time.sleep(delay)
            waited += delay

    def _drive(self, flow: flows.Flow):
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    try:
                        response = self._send(step)
                    except httpx.TransportError as exc:  # the flow may resume (an upload part)
                        step = flow.throw(exc)
                        continue
                    step = flow.send(response)
        except StopIteration as done:
            return done.value


class AsyncClient(_API):
    def __init__(self, base_url: str | None = None, **kwargs: Any):
        super().__init__(base_url, **kwargs)
        self._http = httpx.AsyncClient(timeout=self.timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _request(self, call: Call) -> httpx.Request:
        if call.content is None:
            return super()._request(call)
        make = call.content  # httpx's async client streams only async iterables

        async def chunks():
            for chunk in make():
                yield chunk

        return super()._request(dataclasses.replace(call, content=lambda: chunks()))

    async def _send(self, call: Call) -> httpx.Response:
        waited = 0.0
        while True:
            response = await self._http.send(self._request(call), stream=call.save_to is not None)
            if response.status_code in call.ok:
                if call.save_to is not None and response.status_code == 200:
                    try:
                        with atomic_file(call.save_to) as out:
                            async for chunk in response.aiter_bytes(1 << 20):
                                out.write(chunk)
                    finally:
                        await response.aclose()
                else:
                    await response.aread()
                return response
            await response.aread()
            delay = self._retry_delay(response, waited)
            if delay is None:
                raise error_from_response(response)
            await asyncio.sleep(delay)
            waited += delay

    async def _drive(self, flow: flows.Flow):
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    try:
                        response = await self._send(step)
                    except httpx.TransportError as exc:  # the flow may resume (an upload part)
                        step = flow.throw(exc)
                        continue
                    step = flow.send(response)
        except StopIteration as done:
            return done.value


__all__ = ["AsyncClient", "AsyncJob", "Client", "Job"]
