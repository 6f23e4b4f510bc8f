"""What a job runs with, wherever it runs (the embedded engine, an arq worker): the stores, the
compilers, the build pool, scratch space; and the one way a running job writes its record, only
while the record is still that run of that job."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.cache.store import ContentStore
from app.compile import Compiler
from app.compile.coreai_build import CoreAIBuild
from app.compile.runner import RunBuild
from app.jobs.lifecycle import TERMINAL, Job, JobState
from app.jobs.records import Records
from app.settings import Settings
from app.uploads.blobstore import BlobStore

# The toolchains of the live workers' compilers (a compiled artifact's key names one).
Toolchains = Callable[[], Awaitable[list[dict[str, Any]]]]


@dataclass
class Runtime:
    settings: Settings
    records: Records
    store: ContentStore  # the artifact cache, shared with the API through the data volume
    blobs: BlobStore  # uploaded weights, likewise shared
    compiler: Compiler | None
    worker_id: str
    workdir: Path  # this worker's scratch space, on the same volume as the cache
    # Where builds run: in the API process its build pool, never a thread of its own.
    run_build: RunBuild
    # Compiles an .aimodel for device architectures (needs xcrun: macOS 27 with Xcode 27).
    device_compiler: CoreAIBuild = field(default_factory=CoreAIBuild)

    def scratch(self) -> Path:
        """A new folder of this worker's scratch space (the caller removes it)."""
        path = self.workdir / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path


class Abandoned(Exception):
    """The record moved on (cancelled, or resubmitted as a new run): stop quietly."""


def live(run: int, change: Callable[[Job], Job]) -> Callable[[Job], Job | None]:
    """Apply `change` only to the same run of a job that has not finished."""

    def apply(job: Job) -> Job | None:
        if job.run != run or job.state in TERMINAL:
            return None
        return change(job)

    return apply


async def enter(rt: Runtime, job: Job, state: JobState) -> None:
    """The running job enters `state` (compiling); Abandoned when its record moved on."""
    if await rt.records.update(job.id, live(job.run, lambda j: j.enter(state))) is None:
        raise Abandoned()


async def reach(rt: Runtime, job: Job, stage: str) -> None:
    """The running job reaches a stage of its own (a kit's program): the time is recorded
    beside its states'; Abandoned when its record moved on."""

    def note(j: Job) -> Job:
        now = time.time()
        return j.model_copy(update={"stages": {**j.stages, stage: now}, "updated_at": now})

    if await rt.records.update(job.id, live(job.run, note)) is None:
        raise Abandoned()
