"""MIL Program protobuf -> `model.mil` text, laid out as Apple's coremlcompiler writes it.

Layout proven by the goldens: `program(1.x)`, the program attributes in one bracket line, then
`{`; each function at 4 spaces, `func name<opset>(inputs sorted by name) [attributes] {`; its
operations at 12 spaces; `} -> (outputs);` at 8; `}` closing the program. Functions are sorted by
name; an operation prints `outputs = type(arguments sorted by name)[attributes sorted by name];`
with the bracket left out when there are no attributes, several bindings of one argument as a
tuple `(a, b)`, several outputs comma-separated. Whether the file ends with a newline depends on
the compiler (see `profiles`).

Not seen in any golden, chosen to mirror the function layout: an operation without outputs
prints no `=`; nested blocks (`cond`, `while_loop`) follow the operation as
`{` / `blockN(inputs) {` / operations 8 deeper / `} -> (outputs);` / `}` + `;`.
Not printed, having no known spelling: `docString` fields, TensorType `attributes`, and block
specialisations other than the one named by the function's opset (the one Core ML runs).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.language.dialect import OPSET_TEXT, Dialect
from app.language.errors import BadPackageError
from app.language.messages import MIL_pb2
from app.language.print_values import type_text, value_text

Attributes = Mapping[str, MIL_pb2.Value]


def _attributes(attrs: Attributes, dialect: Dialect) -> str:
    if not attrs:
        return ""
    return (
        "[" + ", ".join(f"{k} = {value_text(attrs[k], dialect, '')}" for k in sorted(attrs)) + "]"
    )


def _argument(arg: MIL_pb2.Argument, dialect: Dialect) -> str:
    parts = [
        b.name if b.WhichOneof("binding") == "name" else value_text(b.value, dialect, "")
        for b in arg.arguments
    ]
    if len(parts) == 1:
        return parts[0]
    return "(" + ", ".join(parts) + ")"


def _named(values, dialect: Dialect) -> str:
    return ", ".join(f"{type_text(v.type, dialect)} {v.name}" for v in values)


def _located(exc: BadPackageError, where: str) -> BadPackageError:
    """The innermost place an error is raised names it; outer ones leave it be."""
    return exc if exc.where else BadPackageError(exc.message, where)


# Programs built from one request shape repeat their operations exactly (a kernel rebuilt for new
# weights changes only weight.bin): their lines are kept, keyed by the operation's bytes, bounded.
_LINES: dict[tuple[bytes, bool, int], str] = {}
_LINES_LIMIT, _SMALL_OP = 8192, 512


class _Printer:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.lines: list[str] = []

    def operation(self, op: MIL_pb2.Operation, indent: int, where: str) -> None:
        small = not op.blocks and op.ByteSize() <= _SMALL_OP
        if small:  # the same op (name, types, small values) prints the same line
            key = (op.SerializeToString(deterministic=True), self.dialect.bare_scalars, indent)
            line = _LINES.get(key)
            if line is not None:
                self.lines.append(line)
                return
        try:
            self._operation(op, indent, where)
        except BadPackageError as exc:
            raise _located(exc, f"{where}, op {_op_label(op)}") from None
        if small and len(_LINES) < _LINES_LIMIT:
            _LINES[key] = self.lines[-1]

    def _operation(self, op: MIL_pb2.Operation, indent: int, where: str) -> None:
        d = self.dialect
        inputs = op.inputs
        args = ", ".join(f"{k} = {_argument(inputs[k], d)}" for k in sorted(inputs))
        call = f"{op.type}({args}){_attributes(op.attributes, d)}"
        head = f"{_named(op.outputs, d)} = {call}" if op.outputs else call
        pad = " " * indent
        if not op.blocks:
            self.lines.append(f"{pad}{head};")
            return
        self.lines.append(f"{pad}{head} {{")
        for i, block in enumerate(op.blocks):
            attrs = _spaced(_attributes(block.attributes, d))
            self.lines.append(f"{' ' * (indent + 4)}block{i}({_named(block.inputs, d)}){attrs} {{")
            self.block_body(block, indent + 8, f"{where}, op {_op_label(op)}, block {i}")
        self.lines.append(f"{pad}}};")

    def block_body(self, block: MIL_pb2.Block, indent: int, where: str) -> None:
        for op in block.operations:
            self.operation(op, indent + 4, where)
        self.lines.append(f"{' ' * indent}}} -> ({', '.join(block.outputs)});")

    def function(self, name: str, fn: MIL_pb2.Function, extra: Attributes, where: str) -> None:
        where = f"{where}, function {name}"
        opset = fn.opset
        if opset not in fn.block_specializations:
            raise BadPackageError(f"no block for the function's opset {opset!r}", where)
        opset_text = OPSET_TEXT.get(opset)
        if opset_text is None:
            raise BadPackageError(f"unknown opset {opset!r}", where)
        inputs = sorted(fn.inputs, key=lambda v: v.name)
        attrs = dict(fn.attributes)
        attrs.update(extra)
        try:
            head = f"    func {name}<{opset_text}>({_named(inputs, self.dialect)})"
            self.lines.append(f"{head}{_spaced(_attributes(attrs, self.dialect))} {{")
        except BadPackageError as exc:
            raise _located(exc, where) from None
        self.block_body(fn.block_specializations[opset], 8, where)


def _spaced(text: str) -> str:
    return f" {text}" if text else ""


def _op_label(op: MIL_pb2.Operation) -> str:
    if op.outputs:
        return f"{op.type} -> {op.outputs[0].name}"
    return op.type


def print_program(
    program: MIL_pb2.Program,
    dialect: Dialect,
    *,
    program_attributes: Attributes | None = None,
    function_attributes: Mapping[str, Attributes] | None = None,
    trailing_newline: bool = False,
    where: str = "model.mlmodel",
) -> str:
    """`model.mil` for `program`. `program_attributes` replace the program's own attributes of
    the same name (the compiler's buildInfo); `function_attributes` add to a function's."""
    printer = _Printer(dialect)
    attrs = dict(program.attributes)
    attrs.update(program_attributes or {})
    printer.lines.append(f"program({dialect.version})")
    if attrs:
        try:
            printer.lines.append(_attributes(attrs, dialect))
        except BadPackageError as exc:
            raise _located(exc, f"{where}, program attributes") from None
    printer.lines.append("{")
    extra = function_attributes or {}
    for name in sorted(program.functions):
        printer.function(name, program.functions[name], extra.get(name, {}), where)
    printer.lines.append("}")
    text = "\n".join(printer.lines)
    return text + "\n" if trailing_newline else text
