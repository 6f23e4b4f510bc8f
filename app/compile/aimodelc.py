"""A prepared `format: "aimodel"` request -> the per-architecture `.aimodelc` set, zipped:

<arch>/<bundle>.aimodelc/...   what coreai-build wrote for each architecture, as it is
<name>.aimodel/...             the asset it compiled
kernel.json                    as for the .aimodel, plus `aimodelc`: architectures, each
                               bundle's ANE regions, the toolchain
compile.log                    every command and what the tool printed
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.artifacts import Prepared
from app.compile.coreai_build import CompiledSet, CoreAIBuild
from app.coreai.asset import write_asset
from app.errors import RequestError
from app.packaging import Entry, layout, to_json, write_zip


async def compile_aimodelc_zip(
    prepared: Prepared,
    tool: CoreAIBuild,
    workdir: Path,
    architectures: list[str],
    timeout_s: float,
) -> tuple[Path, dict[str, Any]]:
    """Compile the request's `.aimodel` for `architectures` inside `workdir` (the caller owns
    it); returns the zip's path and its kernel.json."""
    if prepared.aimodel is None:
        raise RequestError("format", 'a device compile starts from format "aimodel"')
    name = prepared.build.name
    asset = write_asset(prepared.aimodel, workdir / "src", name)
    compiled = await tool.compile(asset, workdir / "out", architectures, timeout_s)
    zip_path = workdir / f"{name}.aimodelc.zip"
    description = await asyncio.to_thread(_zip, prepared, asset, compiled, zip_path)
    return zip_path, description


def _zip(prepared: Prepared, asset: Path, compiled: CompiledSet, path: Path) -> dict[str, Any]:
    from app.artifacts import write

    description = write(prepared, _Discard())  # the .aimodel zip's kernel.json, bytes dropped
    description["aimodelc"] = {
        "architectures": {
            arch: {"bundle": f"{arch}/{bundle.name}", "ane_regions": compiled.ane_regions[arch]}
            for arch, bundle in compiled.bundles.items()
        },
        "toolchain": compiled.toolchain,
    }
    entries = [
        Entry(layout.KERNEL_JSON, to_json(description)),
        Entry("compile.log", compiled.log.encode()),
        *prepared.extra_entries,
        *_files(asset, asset.name),
    ]
    for arch, bundle in compiled.bundles.items():
        entries += _files(bundle, f"{arch}/{bundle.name}")
    with path.open("wb") as f:
        write_zip(f, entries)
    return description


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
