"""Settings: environment variables with the ANE_ prefix (e.g. ANE_DATA_DIR=/var/ane), for the API
and for every farm worker alike (they share storage and queues, so they read the same names).

Defaults are for the local embedded run (`make run`): everything under ./data, no API keys, jobs
in the API process. docs/settings.md names every setting and gives
the defaults of all but the job settings (those are in docs/farm.md); tests/test_settings_docs.py
keeps it in step.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.sizes import (
    DEFAULT_JSON_BYTES,
    DEFAULT_PROGRAM_BYTES,
    DEFAULT_PROGRAM_ELEMENTS,
    DEFAULT_TENSOR_BYTES,
    DEFAULT_TENSOR_ELEMENTS,
)
from app.devices import DEFAULT_PROGRAM_WEIGHT_BYTES

MiB = 1 << 20
GiB = 1 << 30
# Weights per program: the smallest envelope of the device table (an iPhone's 1 GiB), so that a
# default build compiles for every chip it lists (why, and the sources: docs/devices.md).
DEFAULT_PROGRAM_WEIGHT_BUDGET = DEFAULT_PROGRAM_WEIGHT_BYTES
# The largest checkpoint a model kit reads by default, and so what the upload store holds: an 8B
# model in bf16 is 16 GB.
DEFAULT_CHECKPOINT_BYTES = 32 * GiB

# Named in every refusal the budget causes, so that a user knows which knob it is.
PROGRAM_WEIGHT_BUDGET_SETTING = "ANE_MAX_PROGRAM_WEIGHT_BYTES"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ANE_", extra="ignore")

    data_dir: Path = Field(
        Path("data"),
        validate_default=True,  # the default, relative, is made absolute too (_absolute)
        description="artifact cache, blobs and upload spool",
    )
    cache_max_bytes: int = Field(
        2 * GiB, ge=0, description="artifact cache size (LRU by bytes), model kits aside"
    )
    kit_cache_max_bytes: int = Field(
        32 * GiB,
        ge=0,
        description="the artifact cache's room for model kits (LRU by bytes among kits): a kit "
        "predicted larger is refused up front",
    )
    blob_max_bytes: int = Field(
        DEFAULT_CHECKPOINT_BYTES,
        ge=0,
        description="uploaded weights and checkpoint files (LRU by bytes): as large as "
        "ANE_MAX_CHECKPOINT_BYTES, so a checkpoint the kits admit can be held whole",
    )
    max_json_bytes: int = Field(
        DEFAULT_JSON_BYTES,
        ge=1024,
        description="a JSON body or `spec` part, and every JSON file a user hands in (config.json, "
        "generation_config.json, a shard index, kit.json, a device-check report, a rows file)",
    )
    max_weight_bytes: int = Field(1 * GiB, ge=1, description="one uploaded weight tensor")
    max_body_bytes: int = Field(2 * GiB, ge=1, description="a whole multipart or raw body")
    max_upload_bytes: int = Field(
        DEFAULT_CHECKPOINT_BYTES,
        ge=1,
        description="one file uploaded in parts (/v1/blobs/uploads): at most ANE_BLOB_MAX_BYTES, "
        "which must be able to keep it",
    )
    upload_part_bytes: int = Field(
        64 * MiB, ge=1, description="the most one part of a resumable upload may hold"
    )
    max_uploads_in_progress: int = Field(
        16, ge=1, description="resumable uploads one API key may have started and not finished"
    )
    max_upload_reserved_bytes: int = Field(
        DEFAULT_CHECKPOINT_BYTES,
        ge=1,
        description="the declared bytes of one API key's uploads in progress, together: a start "
        "over it is refused before anything is written or evicted (default: ANE_BLOB_MAX_BYTES)",
    )
    upload_part_timeout_s: float = Field(
        60,
        gt=0,
        description="the longest wait for the next bytes of a part: a sender silent for longer "
        "has its part dropped, so the upload is free for the resumed part",
    )
    max_checkpoint_bytes: int = Field(
        DEFAULT_CHECKPOINT_BYTES,
        ge=1,
        description="the tensors of one checkpoint a model kit is built from (an 8B model in "
        "bf16 is 16 GB)",
    )
    max_artifact_bytes: int = Field(4 * GiB, ge=1, description="weights one artifact may hold")
    max_verify_bytes: int = Field(
        4 * GiB,
        ge=1,
        description="memory a model kit's verification may take, estimated from its shapes "
        "before the build starts (attention heads x prefill x context): over it, refused",
    )
    min_free_bytes: int = Field(
        256 * MiB,
        ge=0,
        description="free bytes the data volume must keep: below it /readyz answers not ready",
    )
    max_graph_nodes: int = Field(1000, ge=1, description="nodes one graph request may have")
    max_program_weight_bytes: int = Field(
        DEFAULT_PROGRAM_WEIGHT_BUDGET,
        ge=1,
        description="weights one program may hold: a graph over it is refused unless it asks to "
        "be split; any program over it gets a preflight warning",
    )
    max_tensor_elements: int = Field(
        DEFAULT_TENSOR_ELEMENTS,
        ge=1,
        description="elements one tensor of a program may hold (an input, a weight, any value "
        "an op makes): over it, the request is refused naming the node",
    )
    max_tensor_bytes: int = Field(
        DEFAULT_TENSOR_BYTES, ge=1, description="bytes one tensor of a program may take"
    )
    max_program_elements: int = Field(
        DEFAULT_PROGRAM_ELEMENTS,
        ge=1,
        description="elements all the tensors of one program may hold together",
    )
    max_program_bytes: int = Field(
        DEFAULT_PROGRAM_BYTES, ge=1, description="bytes all the tensors of one program may take"
    )
    workers: int = Field(2, ge=1, le=64, description="worker processes that build kernels")
    max_backlog: int = Field(32, ge=0, description="builds that may wait for a worker")
    sync_wait_s: float = Field(
        30.0, ge=0, description="how long a format=mlmodelc request waits before answering 202"
    )
    retry_after_seconds: int = Field(2, ge=1, description="Retry-After when the backlog is full")
    api_keys: str = Field("", description="comma-separated; empty disables authentication")
    log_level: str = Field("INFO", description="level of the JSON logs")

    # -- jobs (app/jobs) -----------------------------------------------------------------------
    redis_url: str | None = Field(
        None, description="redis://host:port/db; set it to queue jobs on arq for worker machines"
    )
    broker_timeout_s: float = Field(
        5, gt=0, description="one Redis call (connect or answer); past it the broker is down"
    )
    broker_retry_s: float = Field(
        0.5, gt=0, description="a worker's first reconnect delay after the broker went away"
    )
    broker_retry_max_s: float = Field(
        30, gt=0, description="cap of a worker's reconnect delay (it doubles, with jitter)"
    )
    compiler: str = Field("auto", description="auto | xcrun | coremltools | linux | none")
    device_check_runtime: Literal["coreml", "stand-in"] = Field(
        "coreml",
        description="what runs device-check jobs: Core ML (macOS workers), or the labelled "
        "stand-in (the reference executor; its reports say so) for tests on Linux",
    )
    mlmodelc_profile: str | None = Field(
        None,
        description="the coremlcompiler release the linux backend writes .mlmodelc as "
        "(docs/mlmodelc-and-coreai.md); unset: the default release",
    )
    compile_timeout_s: float = Field(300, gt=0, description="one compiler run")
    job_timeout_s: float = Field(
        900,
        gt=0,
        description="a whole kernel job: generate, compile, store (a model kit job's limit "
        "scales with the kit: ANE_KIT_TIMEOUT_BASE_S, ANE_KIT_TIMEOUT_S_PER_GB)",
    )
    kit_timeout_base_s: float = Field(
        900, gt=0, description="a model kit job's time limit before its per-GB share"
    )
    kit_timeout_s_per_gb: float = Field(
        120,
        ge=0,
        description="a model kit job's time limit per GB of the kit it builds (doubled with "
        "verify); the fixed ANE_JOB_TIMEOUT_S is for kernel jobs",
    )
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
    palette_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="threads clustering one weight's palette groups (0: the cores this process "
        "may use); the palettes do not depend on how many",
    )

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        """The data dir as an absolute path, fixed once when the settings are read: the stores
        link files into scratch folders elsewhere (a checkpoint's blobs, for a kit job), and a
        relative link would point beside the link, not under the directory the process started
        in. `make run`'s default `data` is relative."""
        return value.expanduser().absolute()

    @model_validator(mode="after")
    def _uploads_fit_the_blob_store(self) -> Settings:
        """A file the blob store could not keep would evict every other blob and then itself:
        upload limits left at their defaults follow ANE_BLOB_MAX_BYTES (down, and for the
        quota up too); one set above it is refused at start-up, naming both."""
        given = self.model_fields_set
        for name in ("max_upload_bytes", "max_weight_bytes"):
            if getattr(self, name) <= self.blob_max_bytes:
                continue
            if name in given:
                raise ValueError(
                    f"ANE_{name.upper()}={getattr(self, name)} is over ANE_BLOB_MAX_BYTES="
                    f"{self.blob_max_bytes}: the blob store could not keep such a file"
                )
            setattr(self, name, self.blob_max_bytes)
        if "max_upload_reserved_bytes" not in given:
            self.max_upload_reserved_bytes = max(self.blob_max_bytes, self.max_upload_bytes)
        if self.max_upload_bytes > self.max_upload_reserved_bytes:
            raise ValueError(
                f"ANE_MAX_UPLOAD_BYTES={self.max_upload_bytes} is over "
                f"ANE_MAX_UPLOAD_RESERVED_BYTES={self.max_upload_reserved_bytes}: a file of "
                "the largest size could never be started"
            )
        return self

    @cached_property
    def api_key_set(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.api_keys.split(",") if k.strip())

    def backoff(self, attempt: int) -> float:
        """Delay before job attempt `attempt + 1` (attempt counts from 1)."""
        return min(self.job_retry_backoff_s * 2 ** (attempt - 1), 300.0)

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"


def settings_problem() -> str | None:
    """What is wrong with the ANE_* settings of this environment, each named as the environment
    spells it, or None. The entry points ask before anything runs, so a bad value stops
    `ane-kernels` (exit 2) and the service's start with that sentence, not a traceback."""
    try:
        Settings()
    except ValidationError as exc:
        return "; ".join(
            f"ANE_{'_'.join(map(str, e['loc'])).upper()}={e['input']!r}: {e['msg']}"
            if e["loc"]
            else e["msg"]  # a rule between settings: its message names them
            for e in exc.errors()
        )
    return None
