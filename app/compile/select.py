"""Which compiler this machine uses: `xcrun` where it is on PATH, else Core ML through coremltools
on a Mac without the Xcode tools, else the `linux` backend (app/mlmodelc), which runs anywhere.
`ANE_COMPILER=xcrun|coremltools|linux|none` overrides the choice (`auto` is the default);
`ANE_MLMODELC_PROFILE` names the compiler release the linux backend writes as."""

from __future__ import annotations

import os

from app.compile import coremltools_backend, xcrun
from app.compile.base import Compiler
from app.compile.linux import LinuxCompiler
from app.compile.runner import RunBuild, in_thread

CHOICES = ("auto", "xcrun", "coremltools", "linux", "none")


def select_compiler(
    choice: str | None = None, profile: str | None = None, run: RunBuild = in_thread
) -> Compiler | None:
    """The compiler this machine uses; `run` is where it runs the compiles that are work of this
    process's own (the linux and coremltools backends; xcrun is a subprocess anyway)."""
    choice = (choice or os.environ.get("ANE_COMPILER") or "auto").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"ANE_COMPILER={choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "xcrun" or (choice == "auto" and xcrun.available()):
        return xcrun.XcrunCompiler()
    if choice == "coremltools" or (choice == "auto" and coremltools_backend.available()):
        return coremltools_backend.CoreMLToolsCompiler(run)
    if choice in ("linux", "auto"):
        return LinuxCompiler(profile, run)
    return None
