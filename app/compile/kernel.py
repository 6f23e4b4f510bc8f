"""A built kernel -> compiled `.mlmodelc` zip: package, compile, plan placement, zip.

mlmodelc zip:   <name>.mlmodelc/...      (what the compiler wrote: model.mil, coremldata.bin,
                                          weights/weight.bin, metadata.json, ...)
                kernel.json               (as for the package, format "mlmodelc", plus the
                                          compiler backend and toolchain versions)
                compile.log               (the command and everything the compiler printed)
                placement.json            (MLComputePlan per op, or why there is none)
"""

from __future__ import annotations

import asyncio
import shutil
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from app.compile.base import Compiler
from app.compile.placement import placement_report
from app.mil import get_target
from app.packaging import Entry, write_kernel_zip, write_zip
from app.packaging.describe import to_json

if TYPE_CHECKING:
    from app.kernels import KernelBuild

_SMALL = 1 << 20  # files above this are streamed into the zip instead of read whole


@dataclass(frozen=True)
class CompiledKernel:
    zip_path: Path
    description: dict[str, Any]  # kernel.json
    placement: dict[str, Any]  # placement.json
    toolchain: dict[str, str | None]
    log: str


def write_package(
    build: KernelBuild, workdir: Path, extra_entries: Sequence[Entry] = ()
) -> tuple[Path, dict[str, Any]]:
    """Write `<name>.mlpackage/` under `workdir`; return it and the package's kernel.json."""
    zpath = workdir / "package.zip"
    with zpath.open("wb") as f:
        description = write_kernel_zip(build, f, "mlpackage", extra_entries=extra_entries)
    with zipfile.ZipFile(zpath) as zf:
        zf.extractall(workdir / "src")
    zpath.unlink()
    return workdir / "src" / f"{build.name}.mlpackage", description


async def compile_kernel_zip(
    build: KernelBuild,
    compiler: Compiler,
    workdir: Path,
    timeout_s: float,
    *,
    on_compiling: Callable[[], Any] | None = None,
    extra_entries: Sequence[Entry] = (),
) -> CompiledKernel:
    """Compile `build` with `compiler` inside `workdir` (which the caller owns and removes).
    `extra_entries` (e.g. verification.json) go into the package and the compiled zip."""
    package, description = await asyncio.to_thread(write_package, build, workdir, extra_entries)
    return await _compile(
        package, description, compiler, workdir, timeout_s, on_compiling, extra_entries
    )


async def _compile(
    package: Path,
    description: dict[str, Any],
    compiler: Compiler,
    workdir: Path,
    timeout_s: float,
    on_compiling: Callable[[], Any] | None,
    extra_entries: Sequence[Entry],
) -> CompiledKernel:
    if on_compiling is not None:
        await on_compiling()
    outdir = workdir / "out"
    outdir.mkdir()
    result = await compiler.compile(package, outdir, get_target(description["target"]), timeout_s)
    placement = await asyncio.to_thread(placement_report, result.mlmodelc)
    description = {
        **description,
        "format": "mlmodelc",
        "compiler": {"backend": compiler.name, "toolchain": result.toolchain},
    }
    name = description["name"]
    zip_path = workdir / f"{name}.mlmodelc.zip"
    await asyncio.to_thread(
        _write_zip, zip_path, result.mlmodelc, name, description, result.log, placement,
        extra_entries,
    )  # fmt: skip
    shutil.rmtree(package.parent, ignore_errors=True)
    return CompiledKernel(zip_path, description, placement, result.toolchain, result.log)


def _write_zip(
    zip_path: Path,
    mlmodelc: Path,
    name: str,
    description: dict[str, Any],
    log: str,
    placement: dict[str, Any],
    extra_entries: Sequence[Entry] = (),
) -> None:
    root = f"{name}.mlmodelc"
    entries = [
        Entry("kernel.json", to_json(description)),
        Entry("compile.log", log.encode()),
        Entry("placement.json", to_json(placement)),
        *extra_entries,
    ]
    empty_dirs = []
    for path in sorted(mlmodelc.rglob("*")):
        rel = f"{root}/{path.relative_to(mlmodelc).as_posix()}"
        if path.is_dir():
            if not any(path.iterdir()):
                empty_dirs.append(rel)
        elif path.stat().st_size <= _SMALL:
            entries.append(Entry(rel, path.read_bytes()))
        else:
            size = path.stat().st_size
            entries.append(Entry(rel, stream=_copier(path), size=size, compress=False))
    with zip_path.open("wb") as f:
        write_zip(f, entries, empty_dirs)


def _copier(path: Path) -> Callable[[BinaryIO], int]:
    def copy(out: BinaryIO) -> int:
        written = 0
        with path.open("rb") as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
                written += len(chunk)
        return written

    return copy
