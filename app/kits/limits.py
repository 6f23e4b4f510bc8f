"""A model kit's own limits, derived from its checkpoint before any work starts (POST /v1/models):
the checkpoint bytes it reads, the kit's predicted size and the job's time limit.

    checkpoint_bytes    the bytes of the checkpoint's tensors (headers only are read); over
                        ANE_MAX_CHECKPOINT_BYTES the request is refused
    kit_bytes_estimate  what the kit will hold: every program's weights as its layout stores
                        them (app/planner/layout.py), the fp16 embedding table, the tokenizer
                        files; over ANE_KIT_CACHE_MAX_BYTES (the artifact cache's
                        room for kits) the request is refused, since the kit could not be kept
    timeout_s           ANE_KIT_TIMEOUT_BASE_S + ANE_KIT_TIMEOUT_S_PER_GB per GB of the kit's
                        predicted bytes, twice that with `verify` (the float64 model runs over
                        every weight again)

A refusal is a 413 naming the field (`files`) and the setting to change. The limits go into the
job's record, so the worker that runs the job, here or on a farm machine, enforces the time
limit the API derived (docs/kits.md, "Limits").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from app.core.files import scratch_dir
from app.errors import ErrorKind, RequestError
from app.kits.build import KitOptions, kit_lengths, kit_plan
from app.kits.causal_lm import Model, open_model
from app.kits.job import ModelRequest, as_uploaded, checkpoint_folder
from app.planner import Plan
from app.settings import Settings

GB = 10**9
CHECKPOINT_SETTING = "ANE_MAX_CHECKPOINT_BYTES"
KIT_CACHE_SETTING = "ANE_KIT_CACHE_MAX_BYTES"
TIMEOUT_SETTINGS = "ANE_KIT_TIMEOUT_BASE_S + ANE_KIT_TIMEOUT_S_PER_GB"
# A kit holds at most twice its checkpoint's tensor bytes: every weight is read from a 16-bit or
# wider tensor and stored as fp16 at most, and a tied head stores the embedding table again.
KIT_BYTES_PER_CHECKPOINT_BYTE = 2


class KitLimits(BaseModel):
    checkpoint_bytes: int = Field(
        description="bytes of the checkpoint's tensors the build reads (ANE_MAX_CHECKPOINT_BYTES)"
    )
    kit_bytes_estimate: int = Field(
        description="the kit's predicted size: its weights as stored, the embedding table, the "
        "tokenizer files (the cache keeps up to ANE_KIT_CACHE_MAX_BYTES of kits)"
    )
    timeout_s: float = Field(
        description="the job's time limit: ANE_KIT_TIMEOUT_BASE_S + ANE_KIT_TIMEOUT_S_PER_GB per "
        "GB of the kit (twice that with verify)"
    )

    def timeout_message(self) -> str:
        """Why a job that ran out of its time was stopped, naming the settings that set it."""
        return (
            f"the kit job exceeded its time limit of {self.timeout_s:g}s ({TIMEOUT_SETTINGS}"
            f" for a kit of {self.kit_bytes_estimate / GB:.2f} GB) and was stopped"
        )


def timeout_for(kit_bytes: int, verify: bool, settings: Settings) -> float:
    per_gb = settings.kit_timeout_s_per_gb * (2 if verify else 1)
    return settings.kit_timeout_base_s + per_gb * kit_bytes / GB


def longest_timeout_s(settings: Settings) -> float:
    """The longest time limit these settings give any job: a kit of the largest checkpoint they
    allow, verified; at least ANE_JOB_TIMEOUT_S. A farm worker's backstop is past it."""
    largest_kit = KIT_BYTES_PER_CHECKPOINT_BYTE * settings.max_checkpoint_bytes
    return max(settings.job_timeout_s, timeout_for(largest_kit, True, settings))


def kit_bytes(model: Model, plan: Plan) -> int:
    """The kit's predicted size: its programs' weights as its layout stores them (decoder layers
    and head pieces at their precision), the fp16 embedding table and the tokenizer files (rope
    tables and kit.json are small next to them)."""
    tokenizer = sum(p.stat().st_size for p in model.tokenizer_files())
    return plan.weight_bytes + tokenizer


def limits_of(model: Model, options: KitOptions, settings: Settings) -> KitLimits:
    """The limits of a kit of `model`; refused (413, naming the setting) when the checkpoint is
    over ANE_MAX_CHECKPOINT_BYTES, the kit over ANE_KIT_CACHE_MAX_BYTES or its verification
    over ANE_MAX_VERIFY_BYTES; and (422) a context the model does not take, a layer over the
    envelope, or with `strict` a quantization reported failing or not modelled."""
    context, prefill = kit_lengths(model, options, settings.max_verify_bytes)
    plan = kit_plan(model, options, context, prefill)  # refuses what the build would, early
    checkpoint = sum(t.nbytes for t in model.tensors.values())
    if checkpoint > settings.max_checkpoint_bytes:
        raise RequestError(
            "files",
            f"the checkpoint's tensors hold {checkpoint} bytes, over "
            f"{CHECKPOINT_SETTING}={settings.max_checkpoint_bytes}: raise the "
            "setting to build kits of it",
            kind=ErrorKind.TOO_LARGE,
            title="Checkpoint too large",
            limit=settings.max_checkpoint_bytes,
            setting=CHECKPOINT_SETTING,
            checkpoint_bytes=checkpoint,
        )
    kit = kit_bytes(model, plan)
    if kit > settings.kit_cache_max_bytes:
        raise RequestError(
            "files",
            f"the kit would hold about {kit} bytes, more than the "
            f"artifact cache keeps for kits ({KIT_CACHE_SETTING}="
            f"{settings.kit_cache_max_bytes}): raise the setting, or quantize",
            kind=ErrorKind.TOO_LARGE,
            title="Kit too large for the cache",
            limit=settings.kit_cache_max_bytes,
            setting=KIT_CACHE_SETTING,
            kit_bytes_estimate=kit,
        )
    return KitLimits(
        checkpoint_bytes=checkpoint,
        kit_bytes_estimate=kit,
        timeout_s=timeout_for(kit, options.verify, settings),
    )


def kit_limits(
    request: ModelRequest, path_of: Callable[[str], Path | None], settings: Settings
) -> KitLimits:
    """The request's limits from its blobs (`path_of`: a digest's stored file), laid out as a
    checkpoint folder of links that only the headers are read from. Blocking."""
    with scratch_dir(".limits", settings.cache_dir / "tmp") as scratch:
        folder = checkpoint_folder(request, scratch / "checkpoint", path_of)
        with as_uploaded(folder):
            return limits_of(open_model(folder), request.kit_options(), settings)
