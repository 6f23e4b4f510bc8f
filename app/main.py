"""The ASGI app: `uvicorn app.main:app` (or `make run`).

`create_app` wires settings, storage, the worker pool and the routers; the module-level `app`
uses settings from the environment (ANE_*). Jobs (/v1/jobs, and every format=mlmodelc request)
run in this process with the machine's own compiler when it has one, or on `ane-kernels worker`
machines when ANE_REDIS_URL is set.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import __version__
from app.api import openapi
from app.api.access import AccessMiddleware
from app.api.auth import ApiKeyMiddleware
from app.api.problems import install_handlers
from app.observability import logs
from app.routers import blobs, docs, graphs, jobs, kernels, models, onnx, ops, plans, system
from app.settings import Settings, settings_problem
from app.wiring import build_services

DESCRIPTION = """
Apple Neural Engine programs on demand, from one kernel to a whole language model.

* **Kernels**: pick an op from `GET /v1/ops`, send its parameters and weights to
  `POST /v1/kernels/{op}` (or wire ops into a graph: `POST /v1/graphs`), get back a zipped
  `.mlpackage` (or a `model.mil` bundle, an `.mlmodelc`, a Core AI `.aimodel`).
* **Model kits**: upload a Hugging Face checkpoint's files (`POST /v1/blobs/uploads`, in
  resumable parts), then `POST /v1/models` builds every program of the decoder and its head, the
  tables and the tokenizer into one kit (a job: poll `GET /v1/jobs/{id}`). `POST /v1/plan` says
  first, from the config.json alone, how it will run on a device and whether it fits.
* Weights travel inline (small JSON lists), as multipart file parts (.npy, safetensors, raw
  bytes), or as digests of files uploaded once.
* The same request always gives the same bytes; `ETag` is the artifact digest, so
  `If-None-Match` answers 304 and `X-Cache` says whether the artifact was built for you.
* Every error is `application/problem+json` naming the field at fault. Every operation's
  example runs as it is (those naming blobs: upload the example checkpoint's files first, see
  `POST /v1/blobs/uploads`).
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    logs.configure(settings.log_level)
    svc = build_services(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # coremltools, protobuf and numpy leave ~10^5 long-lived objects; a full collection
        # walking them takes ~90 ms, which showed up as p99 latency spikes. Freezing them
        # moves them out of the collector's sight; garbage made per request is still collected.
        gc.collect()
        gc.freeze()
        warming = asyncio.create_task(svc.pool.warm())  # in the background: start-up stays fast
        await svc.jobs.start()
        yield
        await svc.jobs.close()
        warming.cancel()
        svc.pool.shutdown()
        logs.drain()

    app = FastAPI(
        title="ANE Kernel Service",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # app/routers/docs.py serves both pages with local assets
        redoc_url=None,
    )
    app.state.services = svc
    install_handlers(app)
    for module in (ops, kernels, graphs, onnx, jobs, blobs, models, plans, system):
        app.include_router(module.router)
    docs.install(app)
    app.add_middleware(ApiKeyMiddleware, keys=settings.api_key_set)
    app.add_middleware(AccessMiddleware, metrics=svc.metrics)  # outermost: logs refusals too
    openapi.install(app, with_api_keys=bool(settings.api_key_set))
    return app


def _from_environment() -> FastAPI:
    """The app `uvicorn app.main:app` serves; a bad ANE_* value ends the start with a sentence
    naming it (uvicorn would print the validation traceback)."""
    problem = settings_problem()
    if problem is not None:
        raise SystemExit(f"error: {problem}")
    return create_app()


app = _from_environment()
