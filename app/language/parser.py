"""`model.mil` text -> MIL Program protobuf: Apple's compiled text read back, either dialect.

`parse_program(text)` returns the Program (functions with their opset block, operations with
inputs, outputs, attributes and nested blocks) and the dialect the text was written in, so that
`print_program(program, dialect)` gives the same text again. A syntax error raises
`MilSyntaxError` naming the line and column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.language.cursor import Cursor
from app.language.dialect import DIALECTS, OPSET_PROTO, Dialect
from app.language.lexer import Source
from app.language.messages import MIL_pb2
from app.language.parse_values import parse_type, parse_value, starts_value


@dataclass(frozen=True)
class FunctionLines:
    """Where a function stands in the text: its `func` line and each top-level operation's."""

    head: int
    operations: tuple[int, ...]


@dataclass(frozen=True)
class ParsedProgram:
    program: MIL_pb2.Program
    dialect: Dialect
    trailing_newline: bool
    lines: dict[str, FunctionLines] = field(default_factory=dict)  # for messages naming a line


def _attributes(c: Cursor, target) -> None:
    """`[name = value, ...]` into a protobuf map of Values."""
    c.expect("[")

    def item() -> None:
        token = c.token
        key = c.name("an attribute name")
        if key in target:
            raise c.source.error(f"attribute {key!r} given twice", token.offset)
        c.expect("=")
        parse_value(c, target[key])

    c.separated("]", item)


def _named_value(c: Cursor, target: MIL_pb2.NamedValueType) -> None:
    parse_type(c, target.type)
    target.name = c.name("a variable name")


def _binding(c: Cursor, arg: MIL_pb2.Argument) -> None:
    binding = arg.arguments.add()
    if starts_value(c):
        parse_value(c, binding.value)
    else:
        binding.name = c.name("a variable name or a value")


def _argument(c: Cursor, arg: MIL_pb2.Argument) -> None:
    if c.at("("):
        c.advance()
        c.separated(")", lambda: _binding(c, arg))
    else:
        _binding(c, arg)


def _block_tail(c: Cursor, block: MIL_pb2.Block, lines: list[int] | None = None) -> None:
    """`{ operations } -> (outputs);` (the opening brace already read); `lines` collects the line
    each operation starts on."""
    while not c.at("}"):
        if lines is not None:
            lines.append(c.source.position(c.token.offset)[0])
        _operation(c, block.operations.add())
    c.expect("}")
    c.expect("->")
    c.expect("(")
    block.outputs.extend(c.separated(")", lambda: c.name("an output name")))
    c.expect(";")


def _nested_block(c: Cursor, block: MIL_pb2.Block) -> None:
    """`blockN(inputs) [attributes] { operations } -> (outputs);`"""
    c.name("a block label")
    c.expect("(")
    c.separated(")", lambda: _named_value(c, block.inputs.add()))
    if c.at("["):
        _attributes(c, block.attributes)
    c.expect("{")
    _block_tail(c, block)


def _nested_blocks(c: Cursor, op: MIL_pb2.Operation) -> None:
    while not c.at("}"):
        _nested_block(c, op.blocks.add())
    c.expect("}")


def _operation(c: Cursor, op: MIL_pb2.Operation) -> None:
    start = c.token
    if not (c.token.kind == "ident" and c.peek().text == "("):
        while True:
            _named_value(c, op.outputs.add())
            if c.accept("="):
                break
            c.expect(",")
    op.type = c.name("an operation type")
    c.expect("(")

    def argument() -> None:
        token = c.token
        key = c.name("an argument name")
        if key in op.inputs:
            raise c.source.error(f"argument {key!r} given twice", token.offset)
        c.expect("=")
        _argument(c, op.inputs[key])

    c.separated(")", argument)
    if c.at("["):
        _attributes(c, op.attributes)
    if c.accept("{"):
        _nested_blocks(c, op)
    if not c.at(";"):
        raise c.error(
            f"expected ';' after operation {op.type!r} (line {c.source.position(start.offset)[0]})"
        )
    c.advance()


def _function(c: Cursor, program: MIL_pb2.Program, lines: dict[str, FunctionLines]) -> None:
    head = c.source.position(c.token.offset)[0]
    c.expect("func")
    token = c.token
    name = c.name("a function name")
    if name in program.functions:
        raise c.source.error(f"function {name!r} defined twice", token.offset)
    fn = program.functions[name]
    c.expect("<")
    opset_token = c.token
    opset_text = c.name("an opset such as ios18")
    if opset_text not in OPSET_PROTO:
        raise c.source.error(f"unknown opset {opset_text!r}", opset_token.offset)
    fn.opset = OPSET_PROTO[opset_text]
    c.expect(">")
    c.expect("(")
    c.separated(")", lambda: _named_value(c, fn.inputs.add()))
    if c.at("["):
        _attributes(c, fn.attributes)
    c.expect("{")
    operations: list[int] = []
    _block_tail(c, fn.block_specializations[fn.opset], operations)
    lines[name] = FunctionLines(head, tuple(operations))


def parse_program(text: str, name: str = "model.mil") -> ParsedProgram:
    source = Source(text, name)
    c = Cursor(source)
    c.expect("program")
    c.expect("(")
    version = c.token
    if version.kind != "number" or version.text not in DIALECTS:
        raise c.error(f"expected a program version ({', '.join(DIALECTS)})")
    c.advance()
    c.expect(")")
    program = MIL_pb2.Program()
    program.version = 1
    if c.at("["):
        _attributes(c, program.attributes)
    c.expect("{")
    lines: dict[str, FunctionLines] = {}
    while not c.at("}"):
        _function(c, program, lines)
    c.expect("}")
    if c.token.kind != "end":
        raise c.error("expected the end of the text after the program")
    return ParsedProgram(program, DIALECTS[version.text], text.endswith("\n"), lines)
