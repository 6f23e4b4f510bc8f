"""The `linux` backend: Apple's `coremlcompiler compile` emulated by app/mlmodelc, on any OS.

For an ML Program, Apple's compiler does not compile for the ANE (Core ML does that on the device
when it loads the model): it prints the program as `model.mil`, copies the weights and writes the
bundle's descriptions. app/mlmodelc writes those same files, byte for byte as a named compiler
release (`ANE_MLMODELC_PROFILE`) writes them, so `.mlmodelc` needs no Mac. What it cannot give is
the placement report: that needs Core ML itself (a macOS worker, `placement: true`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.compile.base import (
    CompilerError,
    CompileResult,
    CompileTimeout,
    timeout_message,
)
from app.compile.runner import RunBuild, in_thread
from app.core.toolchain import coremltools_version
from app.language.errors import MlmodelcError
from app.language.profiles import ToolchainProfile, get_profile
from app.mil import Target
from app.mlmodelc import CompiledBundle, compile_package, unobserved_note

NAME = "linux"


class LinuxCompiler:
    name = NAME

    def __init__(self, profile: ToolchainProfile | str | None = None, run: RunBuild = in_thread):
        self.run = run  # where the compile runs (the API process: its build pool)
        try:
            self.profile = (
                profile if isinstance(profile, ToolchainProfile) else get_profile(profile)
            )
        except MlmodelcError as exc:  # a setting's fault, found at startup
            raise ValueError(f"ANE_MLMODELC_PROFILE={profile!r}: {exc}") from None

    async def toolchain(self) -> dict[str, str | None]:
        return {
            "compiler": self.name,
            "coremlcompiler": self.profile.coremlc_version,
            "mil": self.profile.mil_version,
            "coremltools": coremltools_version(),
        }

    async def compile(
        self, package: Path, outdir: Path, target: Target, timeout_s: float
    ) -> CompileResult:
        out = outdir / f"{package.stem}.mlmodelc"
        try:  # alone: a compile copies every weight, which no batch of small builds should wait on
            bundle = await asyncio.wait_for(
                self.run(compile_bundle, package, out, self.profile, alone=True), timeout_s
            )
        except TimeoutError:
            raise CompileTimeout(timeout_message(timeout_s)) from None
        notes = tuple(n for n in (unobserved_note(bundle),) if n is not None)
        log = (
            f"app.mlmodelc: {package.name} -> {out.name} as {self.profile.describe()}, "
            f"program({bundle.program_version})\n"
            + "".join(f"  {f}\n" for f in bundle.files)
            + "".join(f"note: {n}\n" for n in notes)
        )
        return CompileResult(out, log, await self.toolchain(), notes)


def compile_bundle(package: Path, out: Path, profile: ToolchainProfile) -> CompiledBundle:
    """The compile itself, as a build worker runs it: its errors are the compiler's, said in
    a form that crosses back from a worker process whole."""
    try:
        return compile_package(package, out, profile)
    except MlmodelcError as exc:
        raise CompilerError(f"{package.name}: {exc}") from None
