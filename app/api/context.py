"""What a request handler can reach: the services built once per app (by app/wiring.py) and
found on the app's state."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from app.cache.faults import BLOB_STORE, free_bytes, same_filesystem, storage_errors
from app.cache.store import ContentStore
from app.jobs.engine import JobEngine
from app.observability.metrics import Metrics
from app.service.kernels import KernelService
from app.service.pool import BuildPool
from app.settings import Settings
from app.storage import make_room, volume_problems
from app.uploads.blobstore import BlobStore
from app.uploads.resumable import UploadLimits, Uploads


@dataclass
class Services:
    settings: Settings
    metrics: Metrics
    cache: ContentStore
    blobs: BlobStore
    pool: BuildPool
    kernels: KernelService
    jobs: JobEngine  # /v1/jobs: in this process, or arq + Redis when ANE_REDIS_URL is set

    async def readiness(self) -> dict[str, str]:
        """Why this process should not get traffic now, per check (empty: ready): the data
        volume (writable, at least ANE_MIN_FREE_BYTES free) and the job broker."""
        problems: dict[str, str] = {}
        volume = await asyncio.to_thread(
            volume_problems, self.cache, self.blobs, self.settings.min_free_bytes
        )
        if volume:
            problems["storage"] = "; ".join(volume)
        broker = await self.jobs.unready()
        if broker:
            problems["broker"] = broker
        return problems

    async def room_for_upload(self, needed: int | None, limit: int) -> None:
        """Before reading an upload of `needed` bytes (its Content-Length): make room for it,
        evicting cached artifacts if that helps, or refuse it with 507 before it is read. An
        upload over its `limit` is left to be refused as too large (413), evicting nothing."""
        if needed and needed <= limit:
            directory = self.blobs.store.tmp_dir
            await asyncio.to_thread(make_room, self.cache, needed, directory, BLOB_STORE)

    def upload_faults(self, needed: int | None) -> contextlib.AbstractContextManager[None]:
        """Storage faults while spooling or storing an upload, as the blob store's errors."""
        return storage_errors(BLOB_STORE, self.blobs.store.root, needed)

    def spool_path(self) -> Path:
        return self.blobs.new_spool_path()

    def spare_bytes(self) -> int:
        """What the blob store's volume could still take: its free bytes, and those evicting
        every cached artifact on it would free. Blocking (a statvfs)."""
        directory = self.blobs.store.tmp_dir
        evictable = self.cache.total_bytes if same_filesystem(self.cache.root, directory) else 0
        return free_bytes(directory) + evictable

    @functools.cached_property
    def uploads(self) -> Uploads:
        """Resumable uploads of whole files, beside the blob store (/v1/blobs/uploads)."""
        s = self.settings
        limits = UploadLimits(
            part_bytes=s.upload_part_bytes,
            max_bytes=s.max_upload_bytes,
            max_count=s.max_uploads_in_progress,
            max_reserved=s.max_upload_reserved_bytes,
            part_timeout_s=s.upload_part_timeout_s,
        )
        return Uploads(self.blobs, limits, self.spare_bytes)


def services_of(request: Request) -> Services:
    return request.app.state.services


async def services(request: Request) -> Services:
    """The app's services, as a FastAPI dependency."""
    return services_of(request)
