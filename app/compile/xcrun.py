"""The `xcrun coremlcompiler` backend (Xcode command line tools, macOS).

    xcrun coremlcompiler compile <pkg.mlpackage> <outdir> --platform iOS --deployment-target 18.0

writes `<outdir>/<pkg stem>.mlmodelc`. The platform is iOS for every target in app/mil/targets.py
(the kernels are for the iPhone/iPad/Mac ANE; an iOS deployment target also sets the opset the
compiler accepts).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from app.compile.base import (
    CompilerCrashed,
    CompilerError,
    CompileResult,
    CompilerUnavailable,
    CompileTimeout,
    timeout_message,
    trim,
)
from app.compile.process import TimedOut, run_relative, version_of
from app.core.toolchain import coremltools_version
from app.mil import Target

PLATFORM = "iOS"


def compile_argv(package: Path, outdir: Path, target: Target) -> list[str]:
    return [
        "xcrun",
        "coremlcompiler",
        "compile",
        str(package),
        str(outdir),
        "--platform",
        PLATFORM,
        "--deployment-target",
        target.platform_version,
    ]


def available() -> bool:
    return shutil.which("xcrun") is not None


class XcrunCompiler:
    name = "xcrun"

    def __init__(self) -> None:
        self._toolchain: dict[str, str | None] | None = None

    async def toolchain(self) -> dict[str, str | None]:
        # Probed once per process: a worker's Xcode does not change under it (restart to upgrade).
        if self._toolchain is None:
            self._toolchain = {
                "compiler": self.name,
                "macos_build": await version_of(["sw_vers", "-buildVersion"]),
                "xcode": await version_of(["xcodebuild", "-version"]),
                "coremlcompiler": await version_of(["xcrun", "coremlcompiler", "version"]),
                "coremltools": coremltools_version(),
            }
        return dict(self._toolchain)

    async def compile(
        self, package: Path, outdir: Path, target: Target, timeout_s: float
    ) -> CompileResult:
        try:
            argv, done = await run_relative(
                lambda src, out: compile_argv(src, out, target), package, outdir, timeout_s
            )
        except FileNotFoundError:
            raise CompilerUnavailable("xcrun is not on PATH (install the Xcode tools)") from None
        except TimedOut:
            raise CompileTimeout(timeout_message(timeout_s)) from None
        log = _log(argv, done.stdout, done.stderr)
        if done.returncode < 0:
            raise CompilerCrashed(
                f"coremlcompiler was killed by signal {-done.returncode}", log
            ) from None
        if done.returncode != 0:
            said = trim(done.stderr) or trim(done.stdout) or f"exit status {done.returncode}"
            raise CompilerError(said, log)
        out = outdir / (package.name.removesuffix(".mlpackage") + ".mlmodelc")
        if not out.is_dir():
            raise CompilerError(f"coremlcompiler succeeded but wrote no {out.name}", log)
        return CompileResult(out, log, await self.toolchain())


def _log(argv: list[str], stdout: str, stderr: str) -> str:
    parts = ["$ " + " ".join(argv)]
    if stdout.strip():
        parts.append(stdout.rstrip())
    if stderr.strip():
        parts.append(stderr.rstrip())
    return "\n".join(parts) + "\n"
