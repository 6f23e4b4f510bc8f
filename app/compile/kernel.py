"""A prepared kernel -> compiled `.mlmodelc` zip: package, compile, plan placement, zip.

mlmodelc zip:   <name>.mlmodelc/...      (what the compiler wrote: model.mil, coremldata.bin,
                                          weights/weight.bin, metadata.json, ...)
                kernel.json               (as for the package, format "mlmodelc", plus the
                                          compiler backend and toolchain versions)
                compile.log               (the command and everything the compiler printed)
                placement.json            (MLComputePlan per op, or why there is none)
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.artifacts import Limits, Prepared, prepare, write
from app.compile.base import CompileFailure, Compiler, CompileResult
from app.compile.linux import NAME as LINUX_COMPILER
from app.compile.linux import LinuxCompiler
from app.compile.placement import placement_report
from app.compile.runner import RunBuild, in_thread
from app.core.files import Sink
from app.language.profiles import DEFAULT_PROFILE, get_profile
from app.mil import Target, get_target
from app.packaging import Entry, layout, to_json, write_zip
from app.packaging.digesting import DigestingWriter
from app.request import KernelRequest

_SMALL = 1 << 20  # files above this are streamed into the zip instead of read whole


@dataclass(frozen=True)
class CompiledKernel:
    zip_path: Path
    digest: str  # of the zip, computed while it was written
    description: dict[str, Any]  # kernel.json
    placement: dict[str, Any]  # placement.json
    toolchain: dict[str, str | None]
    log: str
    conformance: dict[str, Any] | None = None  # Apple's bundle against the linux backend's


@dataclass(frozen=True)
class WrittenPackage:
    """A kernel's `.mlpackage` on disk, what a compile starts from, with what the compiled zip
    takes from the build (small: it crosses back from a build worker, the program does not)."""

    path: Path  # `<name>.mlpackage/`
    description: dict[str, Any]  # the package's kernel.json
    preflight: str  # the ANE preflight's summary
    extra_entries: tuple[Entry, ...] = ()  # verification.json, when asked for


def write_package(prepared: Prepared, workdir: Path) -> WrittenPackage:
    """Write `<name>.mlpackage/` under `workdir`."""
    zpath = workdir / "package.zip"
    with zpath.open("wb") as f:
        description = write(prepared, f, fmt="mlpackage")
    with zipfile.ZipFile(zpath) as zf:
        zf.extractall(workdir / "src")
    zpath.unlink()
    path = workdir / "src" / layout.package_root(prepared.build.name)
    return WrittenPackage(
        path, description, prepared.preflight_summary, tuple(prepared.extra_entries)
    )


def build_package(request: KernelRequest, limits: Limits, workdir: Path) -> WrittenPackage:
    """What a build worker runs for a compiled request: build the program, write its package."""
    return write_package(prepare(request, limits), workdir)


async def compile_kernel_zip(
    prepared: Prepared, compiler: Compiler, workdir: Path, timeout_s: float
) -> CompiledKernel:
    """Compile `prepared` with `compiler` inside `workdir` (which the caller owns and removes),
    every step in this process."""
    package = await in_thread(write_package, prepared, workdir)
    return await compile_package_zip(package, compiler, workdir, timeout_s)


def save_compiled(
    prepared: Prepared, compiler: Compiler, path: Path, timeout_s: float
) -> CompiledKernel:
    """Compile `prepared` into the zip at `path`, atomically: the work happens in a temporary
    directory beside it, so nothing is at `path` unless the whole zip is."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}-", dir=path.parent) as tmp:
        compiled = asyncio.run(compile_kernel_zip(prepared, compiler, Path(tmp), timeout_s))
        os.replace(compiled.zip_path, path)
    return replace(compiled, zip_path=path)


async def compile_package_zip(
    package: WrittenPackage,
    compiler: Compiler,
    workdir: Path,
    timeout_s: float,
    *,
    run: RunBuild = in_thread,
    on_compiling: Callable[[], Any] | None = None,
) -> CompiledKernel:
    """Compile `package` (written under `workdir`) with `compiler`; the steps that are work of
    this process (placement, the conformance compile, the zip) go to `run`. Its extra entries
    (verification.json) go into the compiled zip."""
    if on_compiling is not None:
        await on_compiling()
    outdir = workdir / "out"
    outdir.mkdir()
    target = get_target(package.description["target"])
    result = await compiler.compile(package.path, outdir, target, timeout_s)
    placement = await run(placement_report, result.mlmodelc)
    conformance = None
    if compiler.name != LINUX_COMPILER:  # every real compile checks the linux backend
        conformance = await conformance_with_linux(
            package.path, result, target, workdir, timeout_s, run
        )
    description = {
        **package.description,
        "format": "mlmodelc",
        "compiler": {
            "backend": compiler.name,
            "toolchain": result.toolchain,
            **({"notes": list(result.notes)} if result.notes else {}),
            **({"conformance": conformance} if conformance is not None else {}),
        },
    }
    name = description["name"]
    zip_path = workdir / f"{name}.mlmodelc.zip"
    digest = await run(
        _write_zip,
        zip_path,
        result.mlmodelc,
        name,
        description,
        result.log,
        placement,
        package.extra_entries,
        alone=True,
    )
    shutil.rmtree(package.path.parent, ignore_errors=True)
    return CompiledKernel(
        zip_path, digest, description, placement, result.toolchain, result.log, conformance
    )


async def conformance_with_linux(
    package: Path,
    apple: CompileResult,
    target: Target,
    workdir: Path,
    timeout_s: float,
    run: RunBuild = in_thread,
) -> dict[str, Any]:
    """The linux backend's bundle for the same package, compared with the one Apple's compiler
    wrote, file by file: a conformance signal from every real compile. The profile is the
    compiler's own release, written with the nearest observed release's rules when the linux
    backend has not seen it (said so), or the default when the release is not known at all."""
    version = re.search(r"\d+\.\d+\.\d+", apple.toolchain.get("coremlcompiler") or "")
    release = version.group(0) if version else None
    profile = get_profile(release) if release else DEFAULT_PROFILE
    outdir = workdir / "linux"
    outdir.mkdir()
    try:
        mine = await LinuxCompiler(profile, run).compile(package, outdir, target, timeout_s)
    except CompileFailure as exc:
        return {
            "backend": LINUX_COMPILER,
            "profile": profile.name,
            "identical": False,
            "error": exc.message,
        }
    theirs, ours = _files(apple.mlmodelc), _files(mine.mlmodelc)
    different = await asyncio.to_thread(_differing, theirs, ours)
    report: dict[str, Any] = {
        "backend": LINUX_COMPILER,
        "profile": profile.name,
        "identical": not different and theirs.keys() == ours.keys(),
        "different": different,
        "only_apple": sorted(theirs.keys() - ours.keys()),
        "only_linux": sorted(ours.keys() - theirs.keys()),
    }
    if release is None:
        report["note"] = f"coremlcompiler of unknown version; compared with {profile.describe()}"
    elif not profile.observed:
        report["note"] = f"compared with {profile.describe()}"
    return report


def _files(bundle: Path) -> dict[str, Path]:
    """Every file of a bundle, by relative path."""
    return {p.relative_to(bundle).as_posix(): p for p in bundle.rglob("*") if p.is_file()}


def _differing(theirs: dict[str, Path], ours: dict[str, Path]) -> list[str]:
    """The files both bundles hold whose bytes differ (sizes first, then up to the first
    differing block: the weight files are the bulk and usually equal)."""
    both = theirs.keys() & ours.keys()
    return sorted(f for f in both if not filecmp.cmp(theirs[f], ours[f], shallow=False))


def _write_zip(
    zip_path: Path,
    mlmodelc: Path,
    name: str,
    description: dict[str, Any],
    log: str,
    placement: dict[str, Any],
    extra_entries: Sequence[Entry] = (),
) -> str:
    """Write the zip; returns its digest."""
    root = f"{name}.mlmodelc"
    entries = [
        Entry(layout.KERNEL_JSON, to_json(description)),
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
    with zip_path.open("wb") as f, DigestingWriter(f) as out:
        write_zip(out, entries, empty_dirs)
        return out.digest()


def _copier(path: Path) -> Callable[[Sink], int]:
    def copy(out: Sink) -> int:
        written = 0
        with path.open("rb") as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
                written += len(chunk)
        return written

    return copy
