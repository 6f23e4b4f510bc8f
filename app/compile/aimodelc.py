"""A `format: "aimodel"` request with `architectures` -> the per-architecture `.aimodelc` set,
zipped:

<arch>/<bundle>.aimodelc/...   what coreai-build wrote for each architecture, as it is
<name>.aimodel/...             the asset it compiled
kernel.json                    as for the .aimodel, plus `aimodelc`: architectures, each
                               bundle's ANE regions, the toolchain
compile.log                    every command and what the tool printed

Two halves, as for an .mlmodelc (app/compile/kernel.py): `build_asset` builds the program and
writes the asset (a build worker's work, returning only what is small), `compile_asset_zip`
runs the tool and zips (the job's own work).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.artifacts import Limits, Prepared, prepare, write
from app.compile.coreai_build import CompiledSet, CoreAIBuild
from app.compile.runner import in_thread
from app.coreai.asset import write_asset
from app.errors import RequestError
from app.packaging import Entry, layout, to_json, write_zip
from app.packaging.digesting import DigestingWriter
from app.request import KernelRequest


@dataclass(frozen=True)
class WrittenAsset:
    """A request's `.aimodel` on disk, what a device compile starts from, with what the zip
    takes from the build (small: it crosses back from a build worker, the program does not)."""

    path: Path  # `<name>.aimodel/`
    description: dict[str, Any]  # the .aimodel zip's kernel.json
    preflight: str  # the ANE preflight's summary
    extra_entries: tuple[Entry, ...] = ()  # verification.json, when asked for


@dataclass(frozen=True)
class CompiledAimodel:
    zip_path: Path
    digest: str  # of the zip, computed while it was written
    description: dict[str, Any]  # kernel.json
    toolchain: dict[str, str | None]


def write_asset_of(prepared: Prepared, workdir: Path) -> WrittenAsset:
    """Write `<name>.aimodel/` under `workdir/src`."""
    if prepared.aimodel is None:
        raise RequestError("format", 'a device compile starts from format "aimodel"')
    path = write_asset(prepared.aimodel, workdir / "src", prepared.build.name)
    description = write(prepared, _Discard())  # the .aimodel zip's kernel.json, bytes dropped
    return WrittenAsset(
        path, description, prepared.preflight_summary, tuple(prepared.extra_entries)
    )


def build_asset(request: KernelRequest, limits: Limits, workdir: Path) -> WrittenAsset:
    """What a build worker runs for a device compile: build the program, write its asset."""
    return write_asset_of(prepare(request, limits), workdir)


async def compile_asset_zip(
    asset: WrittenAsset,
    tool: CoreAIBuild,
    workdir: Path,
    architectures: list[str],
    timeout_s: float,
    *,
    on_compiling: Callable[[], Any] | None = None,
) -> CompiledAimodel:
    """Compile `asset` (written under `workdir`) for `architectures` and zip the set there."""
    if on_compiling is not None:
        await on_compiling()
    compiled = await tool.compile(asset.path, workdir / "out", architectures, timeout_s)
    description = {
        **asset.description,
        "aimodelc": {
            "architectures": {
                arch: {"bundle": f"{arch}/{bundle.name}", "ane_regions": compiled.ane_regions[arch]}
                for arch, bundle in compiled.bundles.items()
            },
            "toolchain": compiled.toolchain,
        },
    }
    zip_path = workdir / f"{description['name']}.aimodelc.zip"
    digest = await asyncio.to_thread(_zip, zip_path, asset, compiled, description)
    return CompiledAimodel(zip_path, digest, description, compiled.toolchain)


async def compile_aimodelc_zip(
    prepared: Prepared,
    tool: CoreAIBuild,
    workdir: Path,
    architectures: list[str],
    timeout_s: float,
) -> tuple[Path, dict[str, Any]]:
    """Compile the prepared request's `.aimodel` for `architectures` inside `workdir` (the
    caller owns it), every step in this process; returns the zip's path and its kernel.json."""
    asset = await in_thread(write_asset_of, prepared, workdir)
    compiled = await compile_asset_zip(asset, tool, workdir, architectures, timeout_s)
    return compiled.zip_path, compiled.description


def _zip(path: Path, asset: WrittenAsset, compiled: CompiledSet, description: dict) -> str:
    """Write the zip; returns its digest."""
    entries = [
        Entry(layout.KERNEL_JSON, to_json(description)),
        Entry("compile.log", compiled.log.encode()),
        *asset.extra_entries,
        *_files(asset.path, asset.path.name),
    ]
    for arch, bundle in compiled.bundles.items():
        entries += _files(bundle, f"{arch}/{bundle.name}")
    with path.open("wb") as f, DigestingWriter(f) as out:
        write_zip(out, entries)
        return out.digest()


class _Discard:
    """A sink for a zip written only for the kernel.json it returns."""

    def write(self, data) -> int:
        return memoryview(data).nbytes

    def flush(self) -> None:
        pass


def _files(root: Path, prefix: str) -> list[Entry]:
    return [
        Entry(f"{prefix}/{p.relative_to(root).as_posix()}", p.read_bytes(), compress=False)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]


def save_aimodelc(
    prepared: Prepared, tool: CoreAIBuild, architectures: list[str], path: Path, timeout_s: float
) -> Path:
    """Compile into the zip at `path`, atomically: the work happens in a temporary directory
    beside it, so nothing is at `path` unless the whole zip is."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}-", dir=path.parent) as tmp:
        run = compile_aimodelc_zip(prepared, tool, Path(tmp), architectures, timeout_s)
        zip_path, _ = asyncio.run(run)
        os.replace(zip_path, path)
    return path
