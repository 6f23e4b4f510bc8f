"""One job protocol: every request that runs as a job is a `JobRequest` (key, queue, JSON) read
back from a record by the class its kind names, and runs by its producer (app/jobs/kinds.py); a
new kind of job is one request class and its producer, nothing else touched."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from app.cache.store import ContentStore
from app.compile.runner import in_thread
from app.jobs import kinds
from app.jobs import lifecycle as model
from app.jobs.kinds import PRODUCERS, producer_of
from app.jobs.lifecycle import REQUEST_TYPES, Job, JobState
from app.jobs.select import make_engine
from app.kits.job import DeviceCheckRequest, ModelRequest
from app.request import KernelRequest
from app.settings import Settings
from app.uploads.blobstore import BlobStore

CONV = {"in_channels": 4, "out_channels": 4, "spatial": 2}
GRAPH = {
    "inputs": {"x": {"shape": [1, 4, 1, 2]}},
    "nodes": [{"id": "y", "op": "relu", "inputs": {"x": "x"}}],
    "outputs": {"y": "y"},
}
DIGEST = "sha256:" + "ab" * 32

REQUESTS = {
    "op": KernelRequest.create("conv", CONV, {"weight": np.eye(4, dtype=np.float32)}),
    "functions": KernelRequest.create(
        "decoder_layer",
        {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "seq_len": 4},
        functions={"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 8}},
    ),
    "graph": KernelRequest.create(graph=GRAPH, format="mil"),
    "model": ModelRequest.create({"config.json": DIGEST}, {"context": 64}),
    "device_check": DeviceCheckRequest.create("a" * 64, "m4", [1, 2], 4),
}


@pytest.mark.parametrize("kind", REQUESTS)
def test_a_job_record_reads_its_request_back_by_its_kind(kind):
    request = REQUESTS[kind]
    job = Job(id=request.key, queue="q", request=request)
    again = Job.model_validate_json(job.model_dump_json()).request
    assert request.kind == kind and type(again) is REQUEST_TYPES[kind] is type(request)
    assert again.key == request.key and again.to_json() == request.to_json()
    assert producer_of(again) is PRODUCERS[type(request)]


def test_every_kind_has_a_producer_and_no_request_carries_another_kinds_attributes():
    assert set(PRODUCERS) == set(REQUEST_TYPES.values())
    for stub in ("placement", "architectures", "compiled", "weight_bytes", "artifact_format"):
        assert not hasattr(ModelRequest, stub) and not hasattr(DeviceCheckRequest, stub), stub


@dataclass(frozen=True)
class EchoRequest:
    """A kind of job made here: it asks for a word to be written into the artifact cache."""

    word: str

    kind = "echo"
    op = "echo"
    needs_macos = False
    bypass_cache = False
    filename = "echo.txt"

    @property
    def key(self) -> str:
        return hashlib.sha256(f"echo:{self.word}".encode()).hexdigest()

    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        return {"kind": self.kind, "word": self.word}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EchoRequest:
        return cls(data["word"])


class EchoJobs:
    def refusal(self, request: EchoRequest, rt) -> None:
        return None

    async def stored(self, request: EchoRequest, store, toolchains) -> dict[str, Any] | None:
        entry = await asyncio.to_thread(store.get, request.key)
        return None if entry is None else {"artifact": model.artifact_ref(entry)}

    async def produce(self, request: EchoRequest, rt, job: Job) -> dict[str, Any]:
        path = rt.scratch() / "echo.txt"
        path.write_text(request.word)
        meta = {"filename": request.filename, "digest": "sha256:" + "0" * 64}
        entry = await asyncio.to_thread(rt.store.publish, job.id, path, meta)
        return {"artifact": model.artifact_ref(entry)}


def test_a_new_kind_of_job_is_one_request_class_and_its_producer(tmp_path, monkeypatch):
    """Listed in the two tables (here, for this test only), a kind the engine has never seen is
    submitted and run by its producer; another engine over the same cache finds its artifact
    there without running it."""
    monkeypatch.setitem(REQUEST_TYPES, EchoRequest.kind, EchoRequest)
    monkeypatch.setitem(kinds.PRODUCERS, EchoRequest, EchoJobs())
    request = EchoRequest("hello")
    assert Job.model_validate_json(Job(id="x", queue="q", request=request).model_dump_json())

    async def run() -> tuple[Job, Job]:
        cache = ContentStore(tmp_path / "data" / "artifacts", 1 << 30, ".zip")
        blobs = BlobStore(tmp_path / "data" / "blobs", 1 << 30)
        jobs = []
        for _ in range(2):  # the second engine's records are new: its cache is the same
            engine = make_engine(
                Settings(),
                store=cache,
                blobs=blobs,
                compiler=None,
                workdir=tmp_path / "data" / "work",
                run_build=in_thread,
            )
            await engine.start()
            try:
                jobs.append(await engine.wait((await engine.submit(EchoRequest("hello"))).id, 30))
            finally:
                await engine.close()
        return jobs[0], jobs[1]

    done, again = asyncio.run(run())
    assert done.state == JobState.succeeded and done.artifact is not None, done
    assert done.artifact.filename == "echo.txt" and done.request == request
    path = tmp_path / "data" / "artifacts"
    assert any(p.read_bytes() == b"hello" for p in path.rglob("*") if p.is_file())
    assert again.state == JobState.succeeded and JobState.generating not in again.stages
