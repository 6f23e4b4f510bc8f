"""`.mlmodelc` bundles as Apple's `coremlcompiler` writes them, on any OS, and read back.

    from app.mlmodelc import compile_package, decompile, get_profile
    compile_package("Model.mlpackage", "Model.mlmodelc", get_profile("3500.32.1"))
    decompile("Model.mlmodelc", "Rebuilt.mlpackage")

Works on coremltools' protobuf messages (`Model_pb2`, `MIL_pb2`) for any ML Program. Every
choice made where no Apple output was available to copy is said so in the module concerned.
"""

from app.mlmodelc.compiler import CompiledBundle, bundle_files, compile_package, model_mil
from app.mlmodelc.coremldata import COREMLDATA
from app.mlmodelc.decompiler import DecompiledPackage, decompile, source_model
from app.mlmodelc.dialect import PROGRAM_1_0, PROGRAM_1_3, Dialect
from app.mlmodelc.errors import (
    BadBundleError,
    BadPackageError,
    MilSyntaxError,
    MlmodelcError,
    UnknownProfileError,
    UnsupportedConstructError,
    WeightFileError,
)
from app.mlmodelc.parser import ParsedProgram, parse_program
from app.mlmodelc.printer import print_program
from app.mlmodelc.profiles import (
    DEFAULT_PROFILE,
    PROFILES,
    ToolchainProfile,
    dialect_for,
    get_profile,
)

__all__ = [
    "COREMLDATA",
    "DEFAULT_PROFILE",
    "PROFILES",
    "PROGRAM_1_0",
    "PROGRAM_1_3",
    "BadBundleError",
    "BadPackageError",
    "CompiledBundle",
    "DecompiledPackage",
    "Dialect",
    "MilSyntaxError",
    "MlmodelcError",
    "ParsedProgram",
    "ToolchainProfile",
    "UnknownProfileError",
    "UnsupportedConstructError",
    "WeightFileError",
    "bundle_files",
    "compile_package",
    "decompile",
    "dialect_for",
    "get_profile",
    "model_mil",
    "parse_program",
    "print_program",
    "source_model",
]
