"""Compiler backends (`xcrun coremlcompiler`, Core ML through coremltools, the `linux` backend of
app/mlmodelc) and the ANE placement report. They run inside a worker (see app/jobs for how a
request reaches them) or in the CLI (`save_compiled`)."""

from app.compile.base import (
    CompileFailure,
    Compiler,
    CompilerCrashed,
    CompilerError,
    CompileResult,
    CompilerUnavailable,
    CompileTimeout,
)
from app.compile.kernel import (
    CompiledKernel,
    compile_kernel_zip,
    save_compiled,
)
from app.compile.placement import placement_report, summarize
from app.compile.select import CHOICES, select_compiler

__all__ = [
    "CHOICES",
    "CompileFailure",
    "CompileResult",
    "CompileTimeout",
    "CompiledKernel",
    "Compiler",
    "CompilerCrashed",
    "CompilerError",
    "CompilerUnavailable",
    "compile_kernel_zip",
    "placement_report",
    "save_compiled",
    "select_compiler",
    "summarize",
]
