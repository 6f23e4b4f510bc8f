"""Device compile of an `.aimodel` on a macOS-27 worker: `xcrun coreai-build compile`, once per
requested architecture, giving the per-architecture `.aimodelc` set an app picks from by
`AIModel.deviceArchitectureName`.

    xcrun coreai-build compile <model.aimodel> --architecture <name> --output <dir>

Architecture names are the device table's chip names (`app.devices.COREAI_ARCHITECTURES`:
"m4", "a17-pro", ..., the chips Apple compiles ahead of time for, A17 Pro / M1 and newer), passed
to the tool as they are. The flags and the names are the service's request to the tool; the
labelled stand-in (tests/fake_xcrun) checks the flags, a macOS-27 farm machine confirms both.

What the tool writes is taken as it is: whatever `.aimodelc` directory appears in an
architecture's output directory is that architecture's bundle. One thing is checked, because
`coreai-build` exits 0 and writes a GPU-only bundle when the Neural Engine compile fails
(apple/coreai-models #205): a bundle must hold an ANE region (a file whose name holds
`_ANE_region`, as the bundles in that report do), or the job fails naming the architecture.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from app.compile.base import (
    CompilerCrashed,
    CompilerError,
    CompilerUnavailable,
    CompileTimeout,
    timeout_message,
    trim,
)
from app.compile.process import TimedOut, run_relative, version_of
from app.request import check_architectures

ANE_REGION_MARK = "_ANE_region"
BUNDLE_SUFFIX = ".aimodelc"


def compile_argv(asset: Path, outdir: Path, architecture: str) -> list[str]:
    return [
        "xcrun",
        "coreai-build",
        "compile",
        str(asset),
        "--architecture",
        architecture,
        "--output",
        str(outdir),
    ]


def ane_regions(bundle: Path) -> list[str]:
    """The bundle's files that are Neural Engine regions, by path inside it."""
    return sorted(
        str(p.relative_to(bundle)) for p in bundle.rglob("*") if ANE_REGION_MARK in p.name
    )


@dataclass(frozen=True)
class CompiledSet:
    bundles: dict[str, Path]  # architecture -> its .aimodelc directory
    ane_regions: dict[str, list[str]]  # architecture -> the bundle's ANE region files
    log: str
    toolchain: dict[str, str | None]


class CoreAIBuild:
    name = "coreai-build"

    def __init__(self) -> None:
        self._toolchain: dict[str, str | None] | None = None

    async def toolchain(self) -> dict[str, str | None]:
        if self._toolchain is None:  # probed once per process, like the xcrun backend
            self._toolchain = {
                "compiler": self.name,
                "macos_build": await version_of(["sw_vers", "-buildVersion"]),
                "xcode": await version_of(["xcodebuild", "-version"]),
                "coreai_build": await version_of(["xcrun", "coreai-build", "--version"]),
            }
        return dict(self._toolchain)

    async def compile(
        self, asset: Path, workdir: Path, architectures: list[str], timeout_s: float
    ) -> CompiledSet:
        """Compile `asset` (an .aimodel directory) for each architecture into `workdir/<arch>/`."""
        check_architectures(architectures)  # the request checked them; a direct caller may not
        bundles: dict[str, Path] = {}
        regions: dict[str, list[str]] = {}
        logs = []
        for arch in architectures:
            outdir = workdir / arch
            outdir.mkdir(parents=True)
            bundle, log = await self._one(asset, outdir, arch, timeout_s)
            logs.append(log)
            found = ane_regions(bundle)
            if not found:
                raise CompilerError(
                    f"coreai-build wrote a bundle for {arch} with no Neural Engine region "
                    "(GPU only): the ANE compile failed although the tool exited 0 "
                    "(apple/coreai-models #205)",
                    "".join(logs),
                )
            bundles[arch], regions[arch] = bundle, found
        return CompiledSet(bundles, regions, "".join(logs), await self.toolchain())

    async def _one(self, asset: Path, outdir: Path, arch: str, timeout_s: float):
        try:
            argv, done = await run_relative(
                lambda src, out: compile_argv(src, out, arch), asset, outdir, timeout_s
            )
        except FileNotFoundError:
            raise CompilerUnavailable(
                "xcrun is not on PATH (needs macOS 27 with Xcode 27)"
            ) from None
        except TimedOut:
            raise CompileTimeout(timeout_message(timeout_s, f"coreai-build for {arch}")) from None
        log = "$ " + " ".join(argv) + "\n" + done.stdout + done.stderr
        if done.returncode < 0:
            raise CompilerCrashed(
                f"coreai-build for {arch} was killed by signal {-done.returncode}", log
            )
        if done.returncode != 0:
            said = trim(done.stderr) or trim(done.stdout) or f"exit status {done.returncode}"
            raise CompilerError(f"coreai-build for {arch}: {said}", log)
        found = sorted(p for p in outdir.iterdir() if p.is_dir() and p.name.endswith(BUNDLE_SUFFIX))
        if len(found) != 1:
            raise CompilerError(
                f"coreai-build for {arch} exited 0 but wrote {len(found)} {BUNDLE_SUFFIX} "
                "bundles (expected one)",
                log,
            )
        return found[0], log


def available() -> bool:
    return shutil.which("xcrun") is not None
