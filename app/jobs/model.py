"""What a job is: its request (a `KernelRequest`), its state machine and what it produced.

    queued -> generating -> compiling -> succeeded
         \\          \\            \\-> failed | cancelled
          \\-> cancelled  \\-> failed | cancelled      (compiling only for format mlmodelc)

A job's id is the request's cache key (`KernelRequest.key`), so identical requests are one job. `run` counts resubmissions of a job that failed or was cancelled.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator

from app.cache.store import StoredEntry
from app.kits.job import DeviceCheckRequest, ModelRequest
from app.kits.limits import KitLimits
from app.request import KernelRequest


class JobState(StrEnum):
    queued = "queued"
    generating = "generating"
    compiling = "compiling"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = frozenset({JobState.succeeded, JobState.failed, JobState.cancelled})


def _request(value: Any) -> KernelRequest | ModelRequest | DeviceCheckRequest:
    """A kernel request, a model kit's (POST /v1/models) or a device check's, from its JSON."""
    if isinstance(value, KernelRequest | ModelRequest | DeviceCheckRequest):
        return value
    if value.get("kind") == ModelRequest.kind:
        return ModelRequest.from_json(value)
    if value.get("kind") == DeviceCheckRequest.kind:
        return DeviceCheckRequest.from_json(value)
    return KernelRequest.from_json(value)


# A job record holds its request as the request's own JSON form (inline values included, so a
# worker elsewhere can build it).
StoredRequest = Annotated[
    KernelRequest, PlainValidator(_request), PlainSerializer(lambda r: r.to_json())
]


class JobError(BaseModel):
    kind: str = Field(
        description="spec | compiler | timeout | unavailable | storage | crashed | gave_up"
    )
    message: str = Field(description="for compiler errors, the compiler's own words")
    field: str | None = Field(None, description="the request field at fault, when there is one")


class ArtifactRef(BaseModel):
    key: str = Field(description="where the artifact cache holds it")
    digest: str = Field(description="sha256 of the zip, `sha256:<hex>`")
    size: int
    filename: str
    preflight: str | None = Field(None, description="the ANE preflight's summary")


def artifact_ref(entry: StoredEntry) -> ArtifactRef:
    """A stored artifact as a job records it."""
    return ArtifactRef(
        key=entry.key,
        digest=entry.digest,
        size=entry.size,
        filename=entry.meta["filename"],
        preflight=entry.meta.get("preflight"),
    )


class Job(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    run: int = 0
    queue: str
    request: StoredRequest
    state: JobState = JobState.queued
    stages: dict[str, float] = Field(
        default_factory=dict, description="unix time each state was entered (latest attempt)"
    )
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    attempts: int = 0
    worker: str | None = None
    error: JobError | None = None
    last_error: str | None = Field(None, description="the transient error a retry follows")
    artifact: ArtifactRef | None = None
    limits: KitLimits | None = Field(
        None,
        description="a model kit job's own limits, derived from its checkpoint when it was "
        "submitted; its worker enforces `timeout_s` (kernel jobs: ANE_JOB_TIMEOUT_S)",
    )
    placement: dict[str, Any] | None = Field(None, description="ops on ANE / GPU / CPU")
    toolchain: dict[str, Any] | None = None
    device_check: dict[str, Any] | None = Field(
        None,
        description="a device-check job's report: per program load times and placement, "
        "decode time, tokens and logits against the reference (app/kits/device_check.py)",
    )
    conformance: dict[str, Any] | None = Field(
        None,
        description="a bundle from Apple's compiler against the linux backend's for the same "
        "package, file by file",
    )

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    def enter(self, state: JobState, **changes: Any) -> Job:
        now = time.time()
        return self.model_copy(
            update={
                "state": state,
                "stages": {**self.stages, state.value: now},
                "updated_at": now,
                **changes,
            }
        )

    def public(self) -> dict[str, Any]:
        """The job as the API shows it: the request's weights by digest, inline values left out."""
        data = self.model_dump(mode="json", exclude={"request"})
        data["request"] = self.request.to_json(values=False)
        return data


class Batch(BaseModel):
    """One job per kernel; the batch only lists them (a kernel may be in several batches)."""

    id: str
    jobs: list[str]
    created_at: float = Field(default_factory=time.time)


def batch_view(batch: Batch, jobs: list[Job | None]) -> dict[str, Any]:
    counts = {s.value: 0 for s in JobState}
    counts["expired"] = 0
    for job in jobs:
        counts[job.state.value if job else "expired"] += 1
    finished = all(j is None or j.done for j in jobs)
    ok = all(j is not None and j.state == JobState.succeeded for j in jobs)
    state = ("succeeded" if ok else "failed") if finished else "running"
    return {
        "id": batch.id,
        "state": state,
        "counts": counts,
        "created_at": batch.created_at,
        "jobs": [
            j.public() if j else {"id": jid, "state": "expired"}
            for jid, j in zip(batch.jobs, jobs, strict=True)
        ],
    }


class WorkerInfo(BaseModel):
    id: str
    queue: str
    platform: str
    hostname: str
    pid: int
    compiler: str | None
    toolchain: dict[str, Any] | None
    started_at: float
    last_seen: float
    running: int = 0
    finished: int = 0
    broker: dict[str, Any] | None = Field(
        None,
        description="the worker's link to the broker: reachable, outages ridden out, the last "
        "one (start, end, seconds, error)",
    )
