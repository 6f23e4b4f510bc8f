"""How each kind of request runs as a job: its producer, the one thing the engines and the
pipeline ask about a job's request beyond `JobRequest` (app/jobs/lifecycle.py).

A request says what it is (its key, its queue, its JSON); its producer says how it runs (what an
engine without macOS or a compiler refuses, what the artifact cache may already hold, and the
work). The producers stand beside the requests, not in them: a kernel request sits far below the
builder, the compilers and the stores a job needs (the layers of docs/architecture.md).

A new kind of job: a request class implementing `JobRequest`, listed in `REQUEST_TYPES`
(app/jobs/lifecycle.py), and its producer listed here.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from app.cache.store import ContentStore
from app.errors import FieldError
from app.jobs.kernel_jobs import KernelJobs
from app.jobs.kit_jobs import DeviceCheckJobs, KitJobs
from app.jobs.lifecycle import Job, JobRequest
from app.jobs.runtime import Runtime, Toolchains
from app.kits.job import DeviceCheckRequest, ModelRequest
from app.request import KernelRequest

R_contra = TypeVar("R_contra", contravariant=True)


class Producer(Protocol[R_contra]):
    """How requests of one type run as jobs."""

    def refusal(self, request: R_contra, rt: Runtime) -> FieldError | None:
        """Why jobs run by `rt` in this process (the embedded engine) can never run `request`:
        what it needs (a compiler, Core ML, xcrun) and this machine lacks; None: they can."""
        ...

    async def stored(
        self,
        request: R_contra,
        store: ContentStore,
        toolchains: Toolchains,
    ) -> dict[str, Any] | None:
        """The finished job's fields when the artifact cache already holds what `request`
        makes (`toolchains`: those of the live workers, for a compiled artifact's key)."""
        ...

    async def produce(self, request: R_contra, rt: Runtime, job: Job) -> dict[str, Any]:
        """Run the job once: the changes to its record when it has succeeded."""
        ...


PRODUCERS: dict[type, Producer[Any]] = {
    KernelRequest: KernelJobs(),
    ModelRequest: KitJobs(),
    DeviceCheckRequest: DeviceCheckJobs(),
}


def producer_of(request: JobRequest) -> Producer[Any]:
    return PRODUCERS[type(request)]
