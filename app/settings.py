"""Service settings: environment variables with the ANE_ prefix (e.g. ANE_DATA_DIR=/var/ane).

Defaults are for the local embedded run (`make run`): everything under ./data, no API keys,
no compiler. The README's "Settings" table lists the same names and defaults.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1 << 20
GiB = 1 << 30


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ANE_", extra="ignore")

    data_dir: Path = Field(Path("data"), description="artifact cache, blobs and upload spool")
    cache_max_bytes: int = Field(2 * GiB, ge=0, description="artifact cache size (LRU by bytes)")
    blob_max_bytes: int = Field(8 * GiB, ge=0, description="uploaded weight store (LRU by bytes)")
    max_json_bytes: int = Field(MiB, ge=1024, description="a JSON body or `spec` part")
    max_weight_bytes: int = Field(1 * GiB, ge=1, description="one uploaded weight tensor")
    max_body_bytes: int = Field(2 * GiB, ge=1, description="a whole multipart or raw body")
    max_artifact_bytes: int = Field(4 * GiB, ge=1, description="weights one artifact may hold")
    workers: int = Field(2, ge=1, le=64, description="worker processes that build kernels")
    max_backlog: int = Field(32, ge=0, description="builds that may wait for a worker")
    sync_wait_s: float = Field(
        30.0, ge=0, description="how long a format=mlmodelc request waits before answering 202"
    )
    retry_after_seconds: int = Field(2, ge=1, description="Retry-After when the backlog is full")
    api_keys: str = Field("", description="comma-separated; empty disables authentication")
    log_level: str = Field("INFO", description="level of the JSON logs")

    @cached_property
    def api_key_set(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.api_keys.split(",") if k.strip())

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"
