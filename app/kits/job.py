"""A kit built as a job (POST /v1/models): the checkpoint's files named by the digests of their
uploaded blobs (/v1/blobs/uploads), and the options `ane-kernels model` takes.

`ModelRequest` is a job's request as the job engines take any (app/jobs/lifecycle.py `JobRequest`:
its key, its queue, its JSON form); its job (app/jobs/kit_jobs.py) hands it to `build_kit_zip`
here, which lays the blobs out as a checkpoint folder (links, no copies), builds the kit exactly
as the CLI does, and writes the zip. The key is the digest of
the files' digests and the options: the same checkpoint and options are the same job, and a
kit already in the artifact cache is answered without building.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.checkpoints.files import file_name
from app.core.digest import file_digest, hex_of, spelled
from app.errors import FieldError, RequestError
from app.estimates import device_or_error
from app.kits.build import KitOptions, build_kit
from app.passes import VERSION as HAND_WRITTEN_VERSION

OPTIONS = (
    "format",
    "context",
    "prefill",
    "device",
    "quantize",
    "kv",
    "verify",
    "strict",
    "max_kl",
    "min_top1",
)
_KEY_VERSION = 2  # 2: one quantize config covers the head too (kit_version 3)
DEVICE_CHECK_TOKENS = 8


def _file_name(name: Any) -> str:
    try:
        return file_name(name) if isinstance(name, str) else file_name("")
    except ValueError as exc:
        shown = name if isinstance(name, str) and len(name) <= 64 else repr(name)[:64] + "..."
        raise RequestError(
            f"files.{shown}",
            f"{exc}: a checkpoint file's own name, e.g. model.safetensors or config.json",
        ) from None


@dataclass(frozen=True)
class ModelRequest:
    files: Mapping[str, str]  # checkpoint file name -> blob digest (sha256 of its bytes)
    options: Mapping[str, Any] = field(default_factory=dict)  # as KitOptions names them

    kind = "model"
    op = "model"
    needs_macos = False  # any worker builds a kit
    bypass_cache = False  # the same checkpoint and options: the cached kit

    @classmethod
    def create(cls, files: Mapping[str, Any], options: Mapping[str, Any]) -> ModelRequest:
        if not isinstance(files, Mapping) or not files:
            raise RequestError(
                "files",
                'the checkpoint\'s files by name: {"config.json": '
                '"sha256:...", "model.safetensors": "sha256:..."}',
            )
        checked = {}
        for name, digest in files.items():
            key = hex_of(digest) if isinstance(digest, str) else None
            if key is None:
                raise RequestError(f"files.{name}", f"{digest!r} is not `sha256:<64 hex>`")
            checked[_file_name(name)] = spelled(key)
        if "config.json" not in checked:
            raise RequestError(
                "files",
                f"config.json is missing from it (it names {', '.join(sorted(checked))}): the "
                "kit is planned from the checkpoint's config.json; upload it and name it",
            )
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise RequestError(
                sorted(unknown)[0], f"not an option of a kit; the options are {', '.join(OPTIONS)}"
            )
        # defaults left out: the same kit asked for with or without them is the same job
        default = KitOptions()
        chosen = {k: v for k, v in options.items() if v is not None and v != getattr(default, k)}
        if "device" in chosen:  # "iPhone 16 Pro" and "a18-pro" are the same kit: one key
            chosen["device"] = device_or_error(chosen["device"]).name
        try:
            KitOptions(**chosen).check()
        except TypeError as exc:
            raise RequestError("options", str(exc)) from None
        return cls(dict(sorted(checked.items())), dict(sorted(chosen.items())))

    @property
    def key(self) -> str:
        doc = {
            "kind": self.kind,
            "version": _KEY_VERSION,
            # the programs go through the hand-written pipeline, whose result can follow from
            # the weights (a norm gain of ones): a new pipeline version builds the kit again
            "passes": HAND_WRITTEN_VERSION,
            "files": dict(self.files),
            "options": dict(self.options),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    @property
    def filename(self) -> str:
        return "model.kit.zip"

    def kit_options(self) -> KitOptions:
        return KitOptions(**self.options)

    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "op": self.op,
            "files": dict(self.files),
            "options": dict(self.options),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelRequest:
        return cls(dict(data["files"]), dict(data.get("options") or {}))


def checkpoint_folder(
    request: ModelRequest, folder: Path, path_of: Callable[[str], Path | None]
) -> Path:
    """The request's files as a checkpoint folder: each a link to its stored blob."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, digest in request.files.items():
        stored = path_of(digest)
        if stored is None:
            raise RequestError(
                f"files.{name}",
                f"no blob {digest}: upload the file with "
                "/v1/blobs/uploads first (the store may have evicted it)",
            )
        os.symlink(stored, folder / name)
    return folder


@contextmanager
def as_uploaded(folder: Path) -> Iterator[None]:
    """A refusal about a checkpoint folder `checkpoint_folder` made names its files as the
    request did (`config.json: ...`), not by the server's scratch path."""
    try:
        yield
    except FieldError as exc:
        message = exc.message.replace(f"{folder}/", "").replace(str(folder), "the checkpoint")
        FieldError.__init__(
            exc,
            exc.field,
            message,
            kind=exc.kind,
            title=exc.title,
            retry_after=exc.retry_after,
            **exc.extra,
        )
        raise


def build_kit_zip(request: ModelRequest, folder: Path, out: Path, progress_file: Path) -> dict:
    """Build the kit from `folder` into the zip `out` (atomically), one progress line per
    program appended to `progress_file` (the job's stages read them); its digest and size.
    Runs in a build worker process."""

    def say(line: str) -> None:
        with open(progress_file, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    with as_uploaded(folder):  # scratch beside the zip: the artifact cache's temp area
        result = build_kit(folder, out, request.kit_options(), say, scratch=out.parent)
    passed = None if result.verification is None else result.verification["passed"]
    return {"digest": file_digest(out), "size": out.stat().st_size, "verified": passed}


@dataclass(frozen=True)
class DeviceCheckRequest:
    """A kit checked on a macOS worker with Core ML (app/kits/device_check.py): the kit is a
    model job's artifact, named by that job's id."""

    kit: str  # the POST /v1/models job whose kit to check (its key in the artifact cache)
    device: str  # the chip the worker runs on, as the device table names it
    prompt: tuple[int, ...] | None = None
    max_new_tokens: int = DEVICE_CHECK_TOKENS

    kind = "device_check"
    op = "device_check"
    needs_macos = True  # Core ML runs only there (a labelled stand-in where configured)
    bypass_cache = False  # nothing is cached: the report goes into the job

    @classmethod
    def create(
        cls,
        kit: str,
        device: str,
        prompt: list[int] | None = None,
        max_new_tokens: int = DEVICE_CHECK_TOKENS,
    ) -> DeviceCheckRequest:
        if not isinstance(kit, str) or not kit.isalnum() or len(kit) > 64:
            raise RequestError("kit", "the id of the POST /v1/models job whose kit to check")
        chip = device_or_error(device)
        if max_new_tokens < 1:
            raise RequestError("max_new_tokens", f"at least 1, got {max_new_tokens}")
        return cls(kit, chip.name, tuple(prompt) if prompt else None, max_new_tokens)

    @property
    def key(self) -> str:
        doc = {"kind": self.kind, "version": _KEY_VERSION, **self.to_json()}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    @property
    def filename(self) -> str:
        return "device-check.json"

    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "op": self.op,
            "kit": self.kit,
            "device": self.device,
            "prompt": list(self.prompt) if self.prompt else None,
            "max_new_tokens": self.max_new_tokens,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeviceCheckRequest:
        prompt = data.get("prompt")
        return cls(
            data["kit"],
            data["device"],
            tuple(prompt) if prompt else None,
            int(data.get("max_new_tokens", DEVICE_CHECK_TOKENS)),
        )


def run_device_check(
    request: DeviceCheckRequest, kit_zip: Path, runtime: str, scratch: Path | None = None
) -> dict:
    """The device check of the kit in `kit_zip` with Core ML (`runtime` "coreml") or its labelled
    stand-in ("stand-in"), its scratch under `scratch`. Runs in a build worker process."""
    from app.kits.device_check import CoreMLRuntime, StandInRuntime, device_check
    from app.kits.runner import open_zip

    chosen = StandInRuntime if runtime == "stand-in" else CoreMLRuntime
    prompt = list(request.prompt) if request.prompt else None
    return device_check(
        open_zip(kit_zip),
        chosen,
        device=request.device,
        prompt=prompt,
        max_new_tokens=request.max_new_tokens,
        scratch=scratch,
    )
