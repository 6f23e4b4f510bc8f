"""Job settings (ANE_* environment variables), beside the service's own app/settings.py.

Storage locations (ANE_DATA_DIR and the cache/blob limits) come from app.settings.Settings, so the
API and every worker sharing a volume agree on where artifacts and uploaded weights live.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

QUEUE_MACOS = "ane-macos"  # compile jobs (format mlmodelc): macOS workers with Xcode
QUEUE_LINUX = "ane-linux"  # generation and packaging (mlpackage, mil): any worker
QUEUES = (QUEUE_MACOS, QUEUE_LINUX)


class JobSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ANE_", extra="ignore")

    redis_url: str | None = Field(
        None, description="redis://host:port/db; set it to queue jobs on arq for worker machines"
    )
    compiler: str = Field("auto", description="auto | xcrun | coremltools | none")
    compile_timeout_s: float = Field(300, gt=0, description="one compiler run")
    job_timeout_s: float = Field(900, gt=0, description="a whole job: generate, compile, store")
    job_keep_s: int = Field(86400, ge=1, description="how long finished jobs stay visible")
    job_lease_s: float = Field(
        30,
        gt=0,
        description="a running job's lease, renewed while its worker lives; a job whose worker "
        "died runs again on another worker once the lease lapses",
    )
    job_max_tries: int = Field(3, ge=1, description="attempts per job (dead workers, crashes)")
    job_retry_backoff_s: float = Field(2, ge=0, description="first retry delay; doubles per try")
    worker_heartbeat_s: float = Field(5, gt=0, description="a worker's heartbeat period")
    worker_poll_s: float = Field(0.25, gt=0, description="how often an idle worker polls")
    worker_max_jobs: int = Field(2, ge=1, description="jobs one worker runs at a time")
    embedded_workers: int = Field(2, ge=1, description="in-process job tasks (no Redis)")

    def backoff(self, attempt: int) -> float:
        """Delay before attempt `attempt + 1` (attempt counts from 1)."""
        return min(self.job_retry_backoff_s * 2 ** (attempt - 1), 300.0)
