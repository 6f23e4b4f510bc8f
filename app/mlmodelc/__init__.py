"""`.mlmodelc` bundles as Apple's `coremlcompiler` writes them, on any OS, and read back.

    from app.mlmodelc import compile_package, decompile, get_profile
    compile_package("Model.mlpackage", "Model.mlmodelc", get_profile("3500.32.1"))
    decompile("Model.mlmodelc", "Rebuilt.mlpackage")

Works on coremltools' protobuf messages (`Model_pb2`, `MIL_pb2`) for any ML Program. Every
choice made where no Apple output was available to copy is said so in the module concerned.
"""

# Submodules load on first use: the compiler, the decompiler and the parser need coremltools'
# protobuf messages, whose import takes seconds (all of coremltools, and torch where installed),
# while every ane-kernels command reads PROFILES to build its parser.
from __future__ import annotations

import importlib

_HOMES = {
    "compiler": ("CompiledBundle", "compile_package"),
    "coremldata": ("COREMLDATA",),
    "decompiler": ("DecompiledPackage", "decompile", "source_model"),
    "dialect": ("PROGRAM_1_0", "PROGRAM_1_3", "Dialect"),
    "errors": (
        "BadBundleError",
        "BadPackageError",
        "MilSyntaxError",
        "MlmodelcError",
        "UnknownProfileError",
        "UnsupportedConstructError",
        "WeightFileError",
    ),
    "parser": ("ParsedProgram", "parse_program"),
    "printer": ("print_program",),
    "profiles": ("DEFAULT_PROFILE", "PROFILES", "ToolchainProfile", "dialect_for", "get_profile"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
