"""Rebuilds a program from declarations read one by one (model.mil text or MIL protobuf).

Every op is re-created through the `Builder`, so its types are inferred again and compared with
the declared ones; BLOBFILE consts are read back from `weight.bin` with the declared dtype and
shape. Used by the protobuf loader (`app.mil.from_proto`), which `model.mil` text reaches through the
language layer's parser.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from app.blob import BlobFormatError, BlobReader, blob_dtype
from app.language.paths import WEIGHT_PATH
from app.language.targets import Target
from app.mil.builder import Builder
from app.mil.ir import ConstValue, Function, MILBuildError, Program, Var
from app.mil.ops import lookup
from app.mil.types import StateType, TensorType, ValueType

WeightSource = str | os.PathLike[str] | bytes | BlobReader | None


class MILParseError(ValueError):
    """Text (or a protobuf program) that does not describe a valid program; says where."""

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"{where}: {message}")


@dataclass
class ParsedProgram:
    program: Program
    offsets: dict[str, int]  # blob-backed const name -> metadata offset, as the text gives them
    build_info: dict[str, str] = field(default_factory=dict)


class InPlace(BlobReader):
    """A weight file whose values a program uses where they are (read-only views into it), not
    copied out: for a reader that keeps the file (a memory map) for as long as the program and
    reads programs of a GB one after another (a kit verified program by program)."""


class WeightFile:
    """weight.bin, opened on first use (text without BLOBFILE consts needs none)."""

    def __init__(self, source: WeightSource):
        self.source = source
        self.reader = source if isinstance(source, BlobReader) else None

    def read(self, where: str, name: str, offset: int, t: TensorType) -> np.ndarray:
        if self.source is None:
            raise MILParseError(where, f"const {name!r} is in weight.bin, but none was given")
        if self.reader is None:
            try:
                assert not isinstance(self.source, BlobReader)  # that one is the reader already
                self.reader = BlobReader(self.source)
            except (OSError, BlobFormatError) as exc:
                raise MILParseError("weight.bin", str(exc)) from None
        try:
            values = self.reader.read_values(offset, blob_dtype(t.dtype), t.shape)
            return values if isinstance(self.reader, InPlace) else np.array(values)
        except BlobFormatError as exc:
            raise MILParseError(where, f"const {name!r}: {exc}") from None


class Assembler:
    """Rebuilds one function with the builder from declarations, checking declared types."""

    def __init__(self, target: Target, function: str, weights: WeightFile):
        self.builder = Builder(target, function)
        self.weights = weights
        self.vars: dict[str, Var] = {}
        self.offsets: dict[str, int] = {}

    def param(self, where: str, name: str, vtype: ValueType) -> None:
        try:
            if isinstance(vtype, StateType):
                var = self.builder.state(name, vtype.tensor.dtype, vtype.tensor.shape)
            else:
                var = self.builder.input(name, vtype.dtype, vtype.shape)
        except MILBuildError as exc:
            raise MILParseError(where, str(exc)) from None
        self.vars[name] = var

    def const(self, where: str, name: str, declared: ValueType, value: ConstValue) -> None:
        if value.type != declared:
            raise MILParseError(
                where, f"const {name!r} is declared {declared} but holds {value.type}"
            )
        try:
            self.vars[name] = self.builder.const(name, value)
        except MILBuildError as exc:
            raise MILParseError(where, str(exc)) from None

    def blob(self, where: str, name: str, declared: ValueType, path: str, offset: int) -> None:
        if not isinstance(declared, TensorType) or not declared.dtype.in_blob:
            raise MILParseError(where, f"{declared} cannot be stored in weight.bin")
        if path != WEIGHT_PATH:
            raise MILParseError(where, f"BLOBFILE path {path!r} is not {WEIGHT_PATH!r}")
        data = self.weights.read(where, name, offset, declared)
        self.const(where, name, declared, ConstValue(data, declared))
        self.offsets[name] = offset

    def inline(
        self,
        where: str,
        op_type: str,
        op_name: str,
        arg: str,
        declared: TensorType,
        value: ConstValue | None = None,
        blob: tuple[str, int] | None = None,
    ) -> str:
        """A constexpr argument written as a value (inline or in the attribute block): it becomes
        the const `<op>_<arg>`, named as the builder names literal arguments; returns that name."""
        opdef = lookup(op_type, self.builder.target)
        if opdef is None:
            raise MILParseError(where, f"unknown op type {op_type!r}")
        if opdef.spelling == "refs":
            raise MILParseError(where, f"{op_type} takes variables, not values ({arg!r})")
        name = self.builder.unique(f"{op_name}_{arg}")
        if blob is not None:
            self.blob(where, name, declared, *blob)
        else:
            assert value is not None
            self.const(where, name, declared, value)
        return name

    def op(
        self,
        where: str,
        op_type: str,
        name: str,
        args: dict[str, str | tuple[str, ...]],
        outputs: list[tuple[str, ValueType]],
    ) -> None:
        opdef = lookup(op_type, self.builder.target)
        if opdef is None:
            raise MILParseError(where, f"unknown op type {op_type!r}")
        bound: dict[str, Var | tuple[Var, ...]] = {}
        for arg, ref in args.items():
            spec = opdef.args.get(arg)
            if spec is not None and spec.variadic and isinstance(ref, str):
                ref = (ref,)  # a one-element tuple may be spelled without parentheses
            bound[arg] = (
                tuple(self._var(where, r) for r in ref)
                if isinstance(ref, tuple)
                else (self._var(where, ref))
            )
        try:
            produced = self.builder.op_outputs(op_type, name, out=[n for n, _ in outputs], **bound)
        except MILBuildError as exc:
            raise MILParseError(where, str(exc)) from None
        for var, (out_name, declared) in zip(produced, outputs, strict=True):
            if var.type != declared:
                raise MILParseError(
                    where, f"{out_name!r} is declared {declared} but {op_type} gives {var.type}"
                )
            self.vars[out_name] = var

    def _var(self, where: str, name: str) -> Var:
        try:
            return self.vars[name]
        except KeyError:
            raise MILParseError(where, f"{name!r} is not defined before its use") from None

    def finish(self, where: str, outputs: list[str]) -> Function:
        try:
            program = self.builder.build([self._var(where, n) for n in outputs])
        except MILBuildError as exc:
            raise MILParseError(where, str(exc)) from None
        return program.functions[self.builder.function]
