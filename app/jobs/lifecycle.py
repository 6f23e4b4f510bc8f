"""What a job is: its request (any `JobRequest`: a kernel request, a model kit's, a device
check's), its state machine and what it produced.

    queued -> generating -> compiling -> succeeded
         \\          \\            \\-> failed | cancelled
          \\-> cancelled  \\-> failed | cancelled      (compiling only for compiled formats)

A job's id is the request's key, so identical requests are one job. `run` counts resubmissions of
a job that failed or was cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator

from app.cache.store import StoredEntry
from app.kits.job import DeviceCheckRequest, ModelRequest
from app.kits.limits import KitLimits
from app.request import KernelRequest, RequestKind


class JobState(StrEnum):
    queued = "queued"
    generating = "generating"
    compiling = "compiling"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = frozenset({JobState.succeeded, JobState.failed, JobState.cancelled})


class JobRequest(Protocol):
    """What a request is to the job engines and the records, whatever it builds. How it runs is
    its producer's (app/jobs/kinds.py)."""

    @property
    def kind(self) -> str: ...  # its JSON's "kind": the class that reads it back

    @property
    def op(self) -> str: ...  # one word for what it builds (metrics, the artifact's record)

    @property
    def key(self) -> str: ...  # the job's id: the same request is the same job

    @property
    def needs_macos(self) -> bool: ...  # its queue: Apple's tools, or any worker

    @property
    def bypass_cache(self) -> bool: ...  # build again even when the artifact cache holds it

    @property
    def filename(self) -> str: ...  # its artifact's file name

    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        """The request as data (`values=False`: without inline weight values, for display)."""
        ...

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRequest:
        """The request `to_json` wrote."""
        ...


# Every type of request that runs as a job, by the `kind` its JSON names; a record written before
# kinds were spelled out holds a kernel request.
REQUEST_TYPES: dict[str, type[JobRequest]] = {
    **{kind.value: KernelRequest for kind in RequestKind},
    ModelRequest.kind: ModelRequest,
    DeviceCheckRequest.kind: DeviceCheckRequest,
}


def _request(value: Any) -> JobRequest:
    """A request as it is, or read back from its JSON by the class its kind names."""
    if not isinstance(value, Mapping):
        return value
    return REQUEST_TYPES.get(value.get("kind", ""), KernelRequest).from_json(value)


# A job record holds its request as the request's own JSON form (inline values included, so a
# worker elsewhere can build it).
StoredRequest = Annotated[
    JobRequest, PlainValidator(_request), PlainSerializer(lambda r: r.to_json())
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
