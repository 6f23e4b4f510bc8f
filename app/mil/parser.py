"""Reads `model.mil` text (both the iOS18 and the iOS17 spelling) back into the IR.

Every op is re-created through the `Builder`, so its types are inferred again and compared with
the types the text declares: a text whose declared shapes disagree with what the ops compute is
rejected, naming the line. BLOBFILE consts come back as the values stored in `weight.bin` at the
given offset, read with the dtype and shape the text declares, so a wrong offset or dtype is caught
(as an error when the entry does not fit, as a wrong answer when it fits another tensor).

The rebuilding itself (`Assembler`) lives in `app.mil.assemble`, shared with the protobuf loader.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from app.mil.assemble import Assembler, MILParseError, ParsedProgram, WeightFile, WeightSource
from app.mil.ir import ConstValue, Function, Program
from app.mil.targets import TARGETS, Target
from app.mil.types import DType, StateType, TensorType, ValueType

T = TypeVar("T")


# -- text -------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<number>-?0[xX][0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?[pP][+-]?\d+
                  | -?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_@]*)
      | (?P<arrow>->)
      | (?P<punct>[()\[\]{}<>,=;?])""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Literal:
    """A typed value read from the text: inline data or a weight.bin reference (path, offset)."""

    where: str
    vtype: TensorType
    value: ConstValue | None = None
    blob: tuple[str, int] | None = None


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> Iterator[_Tok]:
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise MILParseError(f"line {line}", f"unexpected character {text[pos]!r}")
        if m.lastgroup != "ws":
            yield _Tok(m.lastgroup or "", m.group(), line)
        line += m.group().count("\n")
        pos = m.end()
    yield _Tok("end", "", line)


class _Parser:
    def __init__(self, text: str, weights: WeightFile):
        self.toks = list(_tokens(text))
        self.i = 0
        self.weights = weights

    # -- token helpers --------------------------------------------------------------------------
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    @property
    def where(self) -> str:
        return f"line {self.tok.line}"

    def fail(self, message: str) -> MILParseError:
        shown = repr(self.tok.text) if self.tok.kind != "end" else "the end of the text"
        return MILParseError(self.where, f"{message}, found {shown}")

    def next(self) -> _Tok:
        tok = self.tok
        self.i += 1
        return tok

    def expect(self, *texts: str) -> None:
        for text in texts:
            if self.tok.text != text or self.tok.kind in ("string", "end"):
                raise self.fail(f"expected {text!r}")
            self.i += 1

    def accept(self, text: str) -> bool:
        if self.tok.text == text and self.tok.kind not in ("string", "end"):
            self.i += 1
            return True
        return False

    def items(self, close: str, parse: Callable[[], T]) -> list[T]:
        """Comma-separated `parse()` results up to the `close` token."""
        out: list[T] = []
        while not self.accept(close):
            if out:
                self.expect(",")
            out.append(parse())
        return out

    def name(self) -> str:
        if self.tok.kind != "name":
            raise self.fail("expected a name")
        return self.next().text

    def string(self) -> str:
        if self.tok.kind != "string":
            raise self.fail("expected a string literal")
        return re.sub(r"\\(.)", r"\1", self.next().text[1:-1])

    def number(self) -> float | int:
        if self.tok.kind != "number":
            raise self.fail("expected a number")
        text = self.next().text
        if "x" in text.lower():
            return float.fromhex(text)
        return float(text) if any(c in text for c in ".eE") else int(text)

    # -- types and literals -----------------------------------------------------------------------
    def dtype(self) -> DType:
        text = self.name()
        try:
            return DType(text)
        except ValueError:
            raise MILParseError(self.where, f"unknown dtype {text!r}") from None

    def vtype(self) -> ValueType:
        if self.accept("state"):
            self.expect("<")
            inner = self.vtype()
            self.expect(">")
            if not isinstance(inner, TensorType):
                raise MILParseError(self.where, "a state must wrap a tensor")
            return StateType(inner)
        if self.accept("tensor"):
            self.expect("<")
            dtype = self.dtype()
            self.expect(",", "[")
            dims = self.items("]", self.dim)
            self.expect(">")
            return TensorType(dtype, tuple(dims))
        return TensorType(self.dtype(), ())  # iOS18 bare scalar

    def dim(self) -> int:
        if self.tok.text == "?":
            raise self.fail("unknown dimensions are not supported")
        value = self.number()
        if not isinstance(value, int):
            raise self.fail("expected an integer dimension")
        return value

    def element(self, dtype: DType):
        if dtype is DType.STRING:
            return self.string()
        if dtype is DType.BOOL:
            word = self.name()
            if word not in ("true", "false"):
                raise MILParseError(self.where, f"expected true or false, found {word!r}")
            return word == "true"
        value = self.number()
        if dtype.is_int and not isinstance(value, int):
            raise MILParseError(self.where, f"{value} is not an integer ({dtype.value})")
        return value

    def value(self, name: str, declared: ValueType, asm: Assembler) -> None:
        """`T(literal)` or `T(BLOBFILE(path = ..., offset = ...))`, added to `asm` as const `name`."""
        lit = self.literal()
        if lit.blob is not None:
            if lit.vtype != declared:
                raise MILParseError(
                    lit.where, f"const {name!r} is declared {declared}, value is {lit.vtype}"
                )
            asm.blob(lit.where, name, lit.vtype, *lit.blob)
            return
        assert lit.value is not None
        asm.const(lit.where, name, declared, lit.value)

    def literal(self) -> _Literal:
        """A typed value: `T(literal)` or `T(BLOBFILE(path = ..., offset = ...))`."""
        where = self.where
        vtype = self.vtype()
        if not isinstance(vtype, TensorType):
            raise MILParseError(where, "a const cannot hold a state")
        self.expect("(")
        if self.accept("BLOBFILE"):
            self.expect("(", "path", "=")
            path = self.scalar(DType.STRING)
            self.expect(",", "offset", "=")
            offset = self.scalar(DType.UINT64)
            self.expect(")", ")")
            return _Literal(where, vtype, blob=(path, offset))
        if vtype.shape:
            self.expect("[")
            items = self.items("]", lambda: self.element(vtype.dtype))
            if len(items) != vtype.size:
                raise MILParseError(where, f"{vtype} needs {vtype.size} values, got {len(items)}")
            data = np.asarray(items, dtype=vtype.dtype.numpy).reshape(vtype.shape)
        else:
            item = self.element(vtype.dtype)
            data = item if vtype.dtype is DType.STRING else np.asarray(item, vtype.dtype.numpy)
        self.expect(")")
        return _Literal(where, vtype, value=ConstValue(data, vtype))

    def is_literal(self) -> bool:
        """At a typed value (`int32(0)`, `tensor<...>(...)`) rather than a variable name."""
        return self.tok.kind == "name" and self.toks[self.i + 1].text in ("(", "<")

    def scalar(self, dtype: DType):
        """A scalar literal in either spelling: `uint64(64)` or `tensor<uint64, []>(64)`."""
        vtype = self.vtype()
        if vtype != TensorType(dtype, ()):
            raise MILParseError(self.where, f"expected a {dtype.value} scalar, found {vtype}")
        self.expect("(")
        item = self.element(dtype)
        self.expect(")")
        return item

    # -- program structure ------------------------------------------------------------------------
    def program(self) -> ParsedProgram:
        self.expect("program", "(")
        version_where = self.where
        version = self.next().text
        self.expect(")")
        info = self.build_info() if self.tok.text == "[" else {}
        self.expect("{")
        functions: dict[str, Function] = {}
        offsets: dict[str, int] = {}
        target: Target | None = None
        while not self.accept("}"):
            fn, fn_target, fn_offsets = self.function()
            if target is not None and fn_target != target:
                raise MILParseError(
                    self.where, f"function {fn.name} targets {fn_target}, not {target}"
                )
            if fn.name in functions:
                raise MILParseError(self.where, f"function {fn.name!r} is defined twice")
            target, functions[fn.name] = fn_target, fn
            offsets.update(fn_offsets)
        if self.tok.kind != "end":
            raise self.fail("expected the end of the text")
        if target is None:
            raise MILParseError(self.where, "the program has no function")
        if version != target.program_version:
            raise MILParseError(
                version_where,
                f"program({version}) does not match {target} (program({target.program_version}))",
            )
        # model.mil names no default: main, else the first function (the one packaged first)
        default = "main" if "main" in functions else next(iter(functions))
        return ParsedProgram(Program(target, functions, default), offsets, info)

    def build_info(self) -> dict[str, str]:
        self.expect("[", "buildInfo", "=", "dict", "<")
        key = self.vtype()
        self.expect(",")
        val = self.vtype()
        self.expect(">")
        if key != TensorType(DType.STRING, ()) or val != key:
            raise MILParseError(self.where, "buildInfo must be a dict of strings")
        self.expect("(", "{")
        pairs = self.items("}", self.string_pair)
        self.expect(")", "]")
        return dict(pairs)

    def string_pair(self) -> tuple[str, str]:
        self.expect("{")
        key = self.string()
        self.expect(",")
        value = self.string()
        self.expect("}")
        return key, value

    def function(self) -> tuple[Function, Target, dict[str, int]]:
        self.expect("func")
        fn_name = self.name()
        self.expect("<")
        where = self.where
        opset = self.name()
        self.expect(">")
        if opset not in TARGETS:
            raise MILParseError(where, f"unsupported target {opset!r}; one of {', '.join(TARGETS)}")
        asm = Assembler(TARGETS[opset], fn_name, self.weights)
        self.expect("(")
        self.items(")", lambda: self.param(asm))
        self.expect("{")
        while not self.accept("}"):
            self.statement(asm)
        self.expect("->", "(")
        where = self.where
        outputs = self.items(")", self.name)
        self.expect(";")
        return asm.finish(where, outputs), TARGETS[opset], asm.offsets

    def param(self, asm: Assembler) -> None:
        where = self.where
        vtype = self.vtype()
        asm.param(where, self.name(), vtype)

    def statement(self, asm: Assembler) -> None:
        where = self.where
        outputs: list[tuple[str, ValueType]] = []
        # `T a, T b = op(...)`; an op without outputs starts `op(`
        if self.toks[self.i + 1].text != "(":
            while True:
                vtype = self.vtype()
                outputs.append((self.name(), vtype))
                if not self.accept(","):
                    break
            self.expect("=")
        op_type = self.name()
        self.expect("(")
        args: dict[str, str | tuple[str, ...]] = {}
        values: dict[str, _Literal] = {}  # constexpr arguments written as values
        for arg, ref in self.items(")", self.argument):
            if arg in args or arg in values:
                raise MILParseError(where, f"argument {arg!r} is given twice")
            if isinstance(ref, _Literal):
                values[arg] = ref
            else:
                args[arg] = ref
        self.expect("[")
        attrs: set[str] = set()
        op_name = val_declared = None
        while not self.accept("]"):
            if attrs:
                self.expect(",")
            attr = self.name()
            self.expect("=")
            if attr in attrs:
                raise MILParseError(self.where, f"attribute {attr!r} is given twice")
            attrs.add(attr)
            if attr == "name":
                op_name = self.scalar(DType.STRING)
            elif attr == "val" and op_type == "const":
                if len(outputs) != 1:
                    raise MILParseError(where, "a const has exactly one output")
                val_declared = outputs[0]
                self.value(outputs[0][0], outputs[0][1], asm)
            elif op_type.startswith("constexpr_") and self.is_literal():
                if attr in args or attr in values:
                    raise MILParseError(self.where, f"argument {attr!r} is given twice")
                values[attr] = self.literal()  # the iOS16 form: arguments as attributes
            else:
                raise self.fail(f"unsupported attribute {attr!r}")
        self.expect(";")
        if op_name is None:
            raise MILParseError(where, f"{op_type} has no name attribute")
        if op_type == "const":
            if val_declared is None or args:
                raise MILParseError(
                    where, f"const {op_name!r} needs a val attribute and no arguments"
                )
            if op_name != val_declared[0]:
                raise MILParseError(where, f"const {op_name!r} is bound to {val_declared[0]!r}")
            return
        for arg, lit in values.items():
            args[arg] = asm.inline(lit.where, op_type, op_name, arg, lit.vtype, lit.value, lit.blob)
        asm.op(where, op_type, op_name, args, outputs)

    def argument(self) -> tuple[str, str | tuple[str, ...] | _Literal]:
        """`name = var`, `name = (var, var, ...)` or, for constexpr ops, `name = T(value)`."""
        arg = self.name()
        self.expect("=")
        if self.accept("("):
            return arg, tuple(self.items(")", self.name))
        if self.is_literal():
            return arg, self.literal()
        if self.tok.kind != "name":
            raise self.fail("expected a variable name or a typed value")
        return arg, self.name()


def parse_text(text: str, weights: WeightSource = None) -> ParsedProgram:
    """Parse model.mil text; `weights` is weight.bin (a path, its bytes, or a BlobReader), needed
    when the text has BLOBFILE consts."""
    return _Parser(text, WeightFile(weights)).program()
