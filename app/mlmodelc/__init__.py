"""`.mlmodelc` bundles as Apple's `coremlcompiler` writes them, on any OS, and read back.

    from app.mlmodelc import compile_package, decompile
    compile_package("Model.mlpackage", "Model.mlmodelc", get_profile("3500.32.1"))
    decompile("Model.mlmodelc", "Rebuilt.mlpackage")

Works on Core ML's protobuf messages for any ML Program; the text itself is the language
layer's (`app.language`: printer, parser, toolchain profiles). Every choice made where no Apple
output was available to copy is said so in the module concerned.
"""

from app.mlmodelc.compiler import CompiledBundle, compile_package, unobserved_note
from app.mlmodelc.coremldata import COREMLDATA
from app.mlmodelc.decompiler import DecompiledPackage, decompile, source_model

__all__ = [
    "COREMLDATA",
    "CompiledBundle",
    "DecompiledPackage",
    "compile_package",
    "decompile",
    "source_model",
    "unobserved_note",
]
