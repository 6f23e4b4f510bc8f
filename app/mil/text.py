"""The IR as `model.mil` text and back, through the language layer's one printer and one parser.

The text is the MIL protobuf of the program (`to_proto`) printed as Apple's compiler prints it
under the default toolchain profile, so the raw `mil` bundle and a `.mlmodelc` built from the same
program hold the same text (the buildInfo the compiler adds aside). Reading goes the other way:
text -> MIL protobuf (`app.language.parse_program`) -> the IR, every op rebuilt and type-checked
(`from_proto`), BLOBFILE consts read back from weight.bin.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.language.errors import MilSyntaxError
from app.language.parser import parse_program
from app.language.printer import print_program as print_protobuf
from app.language.profiles import DEFAULT_PROFILE, ToolchainProfile, dialect_for
from app.mil.assemble import MILParseError, ParsedProgram, WeightSource
from app.mil.from_proto import load_program, target_of_opset
from app.mil.ir import Program
from app.mil.to_proto import emit_program


def emit_text(
    program: Program,
    offsets: Mapping[str, int],
    build_info: Mapping[str, str],
    profile: ToolchainProfile = DEFAULT_PROFILE,
) -> str:
    """model.mil for `program`; `offsets` maps each blob-backed const's name to its metadata offset."""
    return print_protobuf(
        emit_program(program, offsets, build_info),
        dialect_for(program.target.spec_version),
        trailing_newline=profile.text_ends_with_newline,
    )


def parse_text(
    text: str, weights: WeightSource = None, default: str | None = None
) -> ParsedProgram:
    """Parse model.mil text; `weights` is weight.bin (a path, its bytes, or a BlobReader), needed
    when the text has BLOBFILE consts. The text names no default function: `default` when given
    (a bundle's kernel.json says it), else main, else the first by name."""
    try:
        parsed = parse_program(text)
    except MilSyntaxError as exc:
        raise MILParseError(f"line {exc.line}", exc.message) from None
    heads = [lines.head for lines in parsed.lines.values()]
    target = target_of_opset(parsed.program, f"line {min(heads)}" if heads else "program")
    if parsed.dialect.version != target.program_version:
        raise MILParseError(
            "line 1",
            f"program({parsed.dialect.version}) does not match {target} "
            f"(program({target.program_version}))",
        )
    if default is None:
        names = sorted(parsed.program.functions)
        default = "main" if "main" in names else (names[0] if names else "main")
    return load_program(parsed.program, target, weights, default, parsed.lines)
