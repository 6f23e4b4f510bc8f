"""The MIL language, below everything that prints or reads programs.

One dtype table (`dtypes`), one target table (`targets`), Core ML's protobuf messages without
coremltools (`messages`), and the `model.mil` text as Apple's compiler writes it: one printer
(MIL protobuf -> text) and one parser (text -> MIL protobuf), for every dialect Apple writes. The
differences between Apple's own releases (program 1.0 / 1.3, a final newline, the buildInfo the
compiler adds) are parameters of a toolchain profile (`profiles`).

    from app.language import parse_program, print_program, DEFAULT_PROFILE
    parsed = parse_program(text)                 # ParsedProgram(program, dialect, ...)
    text = print_program(parsed.program, parsed.dialect)
"""

from app.language.dialect import PROGRAM_1_0, PROGRAM_1_3, Dialect
from app.language.errors import (
    BadBundleError,
    BadPackageError,
    MilSyntaxError,
    MlmodelcError,
    UnknownProfileError,
    UnsupportedConstructError,
    WeightFileError,
)
from app.language.parser import ParsedProgram, parse_program
from app.language.printer import print_program
from app.language.profiles import (
    DEFAULT_PROFILE,
    PROFILES,
    ToolchainProfile,
    dialect_for,
    get_profile,
)

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "PROGRAM_1_0",
    "PROGRAM_1_3",
    "BadBundleError",
    "BadPackageError",
    "Dialect",
    "MilSyntaxError",
    "MlmodelcError",
    "ParsedProgram",
    "ToolchainProfile",
    "UnknownProfileError",
    "UnsupportedConstructError",
    "WeightFileError",
    "dialect_for",
    "get_profile",
    "parse_program",
    "print_program",
]
