"""The Core ML framework backend: `coremltools.models.utils.compile_model` (macOS only).

It calls `MLModel.compileModelAtURL:` in-process, so it compiles for the host macOS rather than
an iOS deployment target; use it where the Xcode tools are missing. It runs in a thread (the call
blocks; in the API process, in a build worker); neither can be stopped midway, so on timeout
the job fails at once and the compile is left to finish in the background, writing only into
its own temporary directory.
"""

from __future__ import annotations

import asyncio
import platform
import sys
from pathlib import Path

from app.compile.base import (
    CompilerError,
    CompileResult,
    CompilerUnavailable,
    CompileTimeout,
    timeout_message,
    trim,
)
from app.compile.process import version_of
from app.compile.runner import RunBuild, in_thread
from app.core.toolchain import coremltools_version
from app.mil import Target


def available() -> bool:
    if sys.platform != "darwin":
        return False
    try:
        from coremltools.libcoremlpython import _MLModelProxy  # noqa: F401
    except ImportError:
        return False
    return True


class CoreMLToolsCompiler:
    name = "coremltools"

    def __init__(self, run: RunBuild = in_thread) -> None:
        self.run = run  # where the compile runs (the API process: its build pool)
        self._toolchain: dict[str, str | None] | None = None

    async def toolchain(self) -> dict[str, str | None]:
        if self._toolchain is None:
            self._toolchain = {
                "compiler": self.name,
                "macos_build": await version_of(["sw_vers", "-buildVersion"]),
                "macos": platform.mac_ver()[0] or None,
                "coremltools": coremltools_version(),
            }
        return dict(self._toolchain)

    async def compile(
        self, package: Path, outdir: Path, target: Target, timeout_s: float
    ) -> CompileResult:
        if not available():
            raise CompilerUnavailable("coremltools cannot compile here (needs macOS + Core ML)")
        out = outdir / (package.name.removesuffix(".mlpackage") + ".mlmodelc")
        call = f"coremltools.models.utils.compile_model({package.name!r}, {out.name!r})"
        try:
            await asyncio.wait_for(self.run(_compile, package, out, alone=True), timeout_s)
        except TimeoutError:
            raise CompileTimeout(timeout_message(timeout_s)) from None
        except Exception as exc:  # Core ML reports model errors as plain exceptions
            raise CompilerError(trim(str(exc)) or type(exc).__name__, f"{call}\n{exc}\n") from None
        return CompileResult(out, f"{call}\n", await self.toolchain())


def _compile(package: Path, out: Path) -> None:
    from coremltools.models.utils import compile_model

    compile_model(str(package), str(out))
