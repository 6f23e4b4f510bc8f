"""Compiler backends (`xcrun coremlcompiler`, Core ML through coremltools) and the ANE placement
report. They run inside a worker; see app/jobs for how a request reaches them."""

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
    PackageZipCompiler,
    compile_kernel_zip,
    compile_package_zip,
)
from app.compile.placement import placement_report, summarize
from app.compile.select import CHOICES, local_compiler, select_compiler

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
    "PackageZipCompiler",
    "compile_kernel_zip",
    "compile_package_zip",
    "local_compiler",
    "placement_report",
    "select_compiler",
    "summarize",
]
