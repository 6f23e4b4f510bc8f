"""What a job is: its request (`JobSpec`), its state machine and what it produced.

    queued -> generating -> compiling -> succeeded
         \\          \\            \\-> failed | cancelled
          \\-> cancelled  \\-> failed | cancelled      (compiling only for format mlmodelc)

A job's id is the request's cache key (app/cache/keys.py via `JobSpec.key()`), so identical
requests are one job. `run` counts resubmissions of a job that failed or was cancelled.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.cache.keys import artifact_key


class JobState(StrEnum):
    queued = "queued"
    generating = "generating"
    compiling = "compiling"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = frozenset({JobState.succeeded, JobState.failed, JobState.cancelled})


class WeightRef(BaseModel):
    """A resolved weight: a blob in the shared blob store, or a small inline tensor."""

    model_config = ConfigDict(frozen=True)
    digest: str
    dtype: str
    shape: list[int]
    inline: list[Any] | None = Field(None, description="values, for weights sent inline")


class JobSpec(BaseModel):
    """Everything a worker needs to produce the artifact; JSON through Redis."""

    model_config = ConfigDict(frozen=True)
    op: str
    params: dict[str, Any]
    format: Literal["mlpackage", "mil", "mlmodelc"]
    target: str
    name: str | None = None
    weights: dict[str, WeightRef] = Field(default_factory=dict)
    bypass_cache: bool = False
    verify: bool = False  # add verification.json (app/reference)

    @property
    def model_name(self) -> str:
        return self.name or self.op

    @property
    def filename(self) -> str:
        return f"{self.model_name}.{self.format}.zip"

    def key(self, extra: dict[str, Any] | None = None) -> str:
        """The request's cache key: the same function the synchronous path uses."""
        if self.verify:  # only when set, as the synchronous path does
            extra = {**(extra or {}), "verify": True}
        return artifact_key(
            op=self.op,
            params=self.params,
            weights={k: (w.digest, w.dtype, tuple(w.shape)) for k, w in self.weights.items()},
            fmt=self.format,
            target=self.target,
            name=self.model_name,
            extra=extra,
        )

    def public(self) -> dict[str, Any]:
        """The request as the API shows it: weights by digest, inline values left out."""
        data = self.model_dump(mode="json", exclude={"weights"})
        data["weights"] = {
            k: {"digest": w.digest, "dtype": w.dtype, "shape": w.shape}
            for k, w in self.weights.items()
        }
        return data


class JobError(BaseModel):
    kind: str = Field(description="spec | compiler | timeout | unavailable | crashed | gave_up")
    message: str = Field(description="for compiler errors, the compiler's own words")
    field: str | None = Field(None, description="the request field at fault, when there is one")


class ArtifactRef(BaseModel):
    key: str = Field(description="where the artifact cache holds it")
    digest: str = Field(description="sha256 of the zip, `sha256:<hex>`")
    size: int
    filename: str


class Job(BaseModel):
    id: str
    run: int = 0
    queue: str
    spec: JobSpec
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
    placement: dict[str, Any] | None = Field(None, description="ops on ANE / GPU / CPU")
    toolchain: dict[str, Any] | None = None

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
        data = self.model_dump(mode="json", exclude={"spec"})
        data["request"] = self.spec.public()
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
