"""The MIL language, below everything that prints or reads programs.

One dtype table (`dtypes`), one target table (`targets`), Core ML's protobuf messages without
coremltools (`messages`), and the `model.mil` text as Apple's compiler writes it: one printer
(MIL protobuf -> text) and one parser (text -> MIL protobuf), for every dialect Apple writes. The
differences between Apple's own releases (program 1.0 / 1.3, a final newline, the buildInfo the
compiler adds) are parameters of a toolchain profile (`profiles`).

    from app.language.parser import parse_program
    from app.language.printer import print_program
    parsed = parse_program(text)                 # ParsedProgram(program, dialect, ...)
    text = print_program(parsed.program, parsed.dialect)

The package itself imports nothing: a command that only needs the profile table or the target
table does not load the protobuf messages."""
