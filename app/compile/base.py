"""The compiler interface: an .mlpackage directory in, an .mlmodelc directory out.

Failures are values a job can report as they are: `CompilerError` carries the compiler's own
message (its stderr, trimmed), `CompileTimeout` names the limit that was hit, `CompilerCrashed`
(killed by a signal, e.g. out of memory) is worth retrying elsewhere, `CompilerUnavailable`
means this machine cannot compile at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.mil import Target

MAX_MESSAGE = 4000  # characters of compiler output kept in an error message


@dataclass(frozen=True)
class CompileResult:
    mlmodelc: Path  # the compiled directory, `<name>.mlmodelc`
    log: str  # what the compiler printed (stdout then stderr)
    toolchain: dict[str, str | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the build's report must say (kernel.json compiler.notes)


class CompileFailure(Exception):
    """Base of the compile errors a job reports; `kind` goes into the job's error."""

    kind = "compile"
    retryable = False

    def __init__(self, message: str, log: str = ""):
        self.message, self.log = message, log
        super().__init__(message)


class CompilerError(CompileFailure):
    """The compiler rejected the model; `message` is what it said."""

    kind = "compiler"


class CompileTimeout(CompileFailure):
    kind = "timeout"


class CompilerCrashed(CompileFailure):
    """The compiler died without saying why (a signal): the machine, not the model, is suspect."""

    kind = "crashed"
    retryable = True


class CompilerUnavailable(CompileFailure):
    kind = "unavailable"


class Compiler(Protocol):
    name: str

    async def toolchain(self) -> dict[str, str | None]:
        """Versions that decide the compiled bytes (they go into kernel.json and the cache key)."""
        ...

    async def compile(
        self, package: Path, outdir: Path, target: Target, timeout_s: float
    ) -> CompileResult:
        """Compile `package` (an .mlpackage directory) into `outdir/<stem>.mlmodelc`."""
        ...


def trim(text: str, limit: int = MAX_MESSAGE) -> str:
    """The end of a long compiler output is where the error is: keep the tail."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :]


def timeout_message(limit_s: float, what: str = "compile") -> str:
    return f"{what} exceeded ANE_COMPILE_TIMEOUT_S={limit_s:g}s and was stopped"
