"""Which compiler this machine uses: `xcrun` where it is on PATH, else coremltools on a Mac with
Core ML, else none. `ANE_COMPILER=xcrun|coremltools|none` overrides the choice (`auto` is the
default)."""

from __future__ import annotations

import os

from app.compile import coremltools_backend, xcrun
from app.compile.base import Compiler

CHOICES = ("auto", "xcrun", "coremltools", "none")


def select_compiler(choice: str | None = None) -> Compiler | None:
    choice = (choice or os.environ.get("ANE_COMPILER") or "auto").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"ANE_COMPILER={choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "xcrun" or (choice == "auto" and xcrun.available()):
        return xcrun.XcrunCompiler()
    if choice == "coremltools" or (choice == "auto" and coremltools_backend.available()):
        return coremltools_backend.CoreMLToolsCompiler()
    return None
