"""Kernel artifacts back into the IR: the ML Program protobuf of an .mlpackage, or a model.mil
bundle, each with the weight.bin beside it.

Reading the artifact itself (not kernel.json's recipe) is the point: a package whose protobuf or
weight offsets are wrong rebuilds into a program that fails here or computes a wrong answer.
Ops are re-created through the builder (`app.mil.assemble.Assembler`), so types are checked again.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from app.blob import BlobDType, unpack_subbyte
from app.mil import TARGETS, ConstValue, DType, Function, Program, StateType, TensorType
from app.mil.assemble import Assembler, MILParseError, WeightFile, WeightSource
from app.mil.parser import parse_text
from app.mil.types import ValueType
from app.mlmodelc import COREMLDATA, MlmodelcError, source_model
from app.packaging import layout
from app.toolchain import quiet_coremltools

with quiet_coremltools():
    from coremltools.proto import MIL_pb2 as pb
    from coremltools.proto import Model_pb2

_DTYPES = {d.proto: d for d in DType}


class ArtifactError(ValueError):
    """The artifact cannot be read back into a program; the message says why."""


@dataclass
class LoadedArtifact:
    kind: str  # "mlpackage", "mlmodelc" or "mil"
    program: Program


# -- protobuf -----------------------------------------------------------------------------------


def _value_type(vt: pb.ValueType, where: str) -> ValueType:
    kind = vt.WhichOneof("type")
    if kind == "stateType":
        inner = _value_type(vt.stateType.wrappedType, where)
        if not isinstance(inner, TensorType):
            raise MILParseError(where, "a state must wrap a tensor")
        return StateType(inner)
    if kind != "tensorType":
        raise MILParseError(where, f"unsupported value type {kind}")
    tt = vt.tensorType
    if tt.dataType not in _DTYPES:
        raise MILParseError(where, f"unknown MIL.proto data type {tt.dataType}")
    dims = []
    for d in tt.dimensions:
        if d.WhichOneof("dimension") != "constant":
            raise MILParseError(where, "unknown dimensions are not supported")
        dims.append(d.constant.size)
    if len(dims) != tt.rank:
        raise MILParseError(where, f"rank {tt.rank} with {len(dims)} dimensions")
    return TensorType(_DTYPES[tt.dataType], tuple(dims))


def _immediate(val: pb.Value, t: TensorType, where: str) -> ConstValue:
    tv = val.immediateValue.tensor
    field = tv.WhichOneof("value")
    if t.dtype is DType.STRING:
        if field != "strings" or len(tv.strings.values) != 1:
            raise MILParseError(where, "a string const needs exactly one string")
        return ConstValue(tv.strings.values[0], t)
    if field == "bytes" and t.dtype.is_subbyte:
        try:
            data = unpack_subbyte(tv.bytes.values, BlobDType[t.dtype.name], t.size)
        except ValueError as exc:
            raise MILParseError(where, f"{t}: {exc}") from None
    elif field == "bytes":
        data = np.frombuffer(tv.bytes.values, dtype=t.dtype.numpy.newbyteorder("<"))
    elif field is not None:
        data = np.asarray(list(getattr(tv, field).values), dtype=t.dtype.numpy)
    else:
        data = np.zeros(0, t.dtype.numpy)
    if data.size != t.size:
        raise MILParseError(where, f"{t} needs {t.size} values, the protobuf holds {data.size}")
    return ConstValue(data.astype(t.dtype.numpy).reshape(t.shape), t)


def _name(op: pb.Operation, where: str) -> str:
    attr = op.attributes.get("name")
    if attr is None or not attr.immediateValue.tensor.strings.values:
        raise MILParseError(where, f"an op of type {op.type} has no name attribute")
    return attr.immediateValue.tensor.strings.values[0]


def _function(name: str, fn: pb.Function, target, weights: WeightFile) -> Function:
    if fn.opset != target.opset:
        raise MILParseError(f"function {name}", f"opset {fn.opset!r}, expected {target.opset!r}")
    asm = Assembler(target, name, weights)
    for param in fn.inputs:
        where = f"input {param.name!r}"
        asm.param(where, param.name, _value_type(param.type, where))
    block = fn.block_specializations[fn.opset]
    for index, op in enumerate(block.operations):
        op_name = _name(op, f"operation {index} ({op.type})")
        where = f"op {op_name!r}"
        outputs = [(o.name, _value_type(o.type, where)) for o in op.outputs]
        if op.type == "const":
            if len(outputs) != 1 or op.inputs or "val" not in op.attributes:
                raise MILParseError(where, "a const needs one output, a val and no inputs")
            if outputs[0][0] != op_name:
                raise MILParseError(where, f"const output {outputs[0][0]!r} differs from its name")
            val = op.attributes["val"]
            declared = _value_type(val.type, where)
            if not isinstance(declared, TensorType) or declared != outputs[0][1]:
                raise MILParseError(where, f"val type {declared} differs from the output type")
            if val.WhichOneof("value") == "blobFileValue":
                blob = val.blobFileValue
                asm.blob(where, op_name, declared, blob.fileName, blob.offset)
            else:
                asm.const(where, op_name, declared, _immediate(val, declared, where))
            continue
        # A constexpr's const arguments come as values: bound to its inputs (iOS18 form) or as
        # attributes (iOS16 form). Sorted, so their consts are made in the order the text has them.
        values = {arg: v for arg, v in op.attributes.items() if arg != "name"}
        args: dict[str, str | tuple[str, ...]] = {}
        for arg, binding in op.inputs.items():
            kinds = [b.WhichOneof("binding") for b in binding.arguments]
            if kinds == ["value"] and arg not in values:
                values[arg] = binding.arguments[0].value
                continue
            if any(kind != "name" for kind in kinds) or arg in values:
                raise MILParseError(where, f"argument {arg!r}: unsupported binding {kinds}")
            names = tuple(b.name for b in binding.arguments)
            args[arg] = names[0] if len(names) == 1 else names
        for arg in sorted(values):
            args[arg] = _inline(asm, where, op.type, op_name, arg, values[arg])
        asm.op(where, op.type, op_name, args, outputs)
    return asm.finish(f"function {name}", list(block.outputs))


def _inline(asm: Assembler, where: str, op_type: str, op_name: str, arg: str, val: pb.Value) -> str:
    declared = _value_type(val.type, where)
    if not isinstance(declared, TensorType):
        raise MILParseError(where, f"argument {arg!r}: a value must be a tensor")
    if val.WhichOneof("value") == "blobFileValue":
        blob = (val.blobFileValue.fileName, val.blobFileValue.offset)
        return asm.inline(where, op_type, op_name, arg, declared, blob=blob)
    return asm.inline(where, op_type, op_name, arg, declared, _immediate(val, declared, where))


def load_model(model: Model_pb2.Model | bytes, weights: WeightSource = None) -> Program:
    """The program of an ML Program model (its Model message or serialized bytes); `weights` is
    its weight.bin (path, bytes or BlobReader) when blob-backed consts are present."""
    if isinstance(model, bytes | bytearray):
        message = Model_pb2.Model()
        try:
            message.ParseFromString(bytes(model))
        except Exception as exc:  # protobuf raises DecodeError, whose home module varies
            raise MILParseError("model.mlmodel", f"not a Model protobuf: {exc}") from None
        model = message
    if model.WhichOneof("Type") != "mlProgram":
        raise MILParseError("model.mlmodel", "the model is not an ML Program")
    target = next(
        (t for t in TARGETS.values() if t.spec_version == model.specificationVersion), None
    )
    if target is None:
        known = ", ".join(f"{t.spec_version} ({t.name})" for t in TARGETS.values())
        raise MILParseError(
            "model.mlmodel",
            f"specificationVersion {model.specificationVersion}: the reference runs programs of "
            f"specification {known}",
        )
    reader = WeightFile(weights)
    functions = {
        name: _function(name, fn, target, reader)
        for name, fn in sorted(model.mlProgram.functions.items())
    }
    default = model.description.defaultFunctionName or "main"  # set in multifunction packages
    if default not in functions:
        raise MILParseError("model.mlmodel", f"the program has no {default} function")
    return Program(target, functions, default)


# -- artifacts ----------------------------------------------------------------------------------


class _Files:
    """Read-only access to the files of a zip or a directory, by relative posix path."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = zipfile.ZipFile(path) if path.is_file() else None

    def names(self) -> list[str]:
        if self.zip is not None:
            return [n for n in self.zip.namelist() if not n.endswith("/")]
        return [p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file()]

    def read(self, name: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(name)
        return (self.path / name).read_bytes()


def open_artifact(path: str | Path) -> LoadedArtifact:
    """A kernel zip (or an unzipped .mlpackage / mil bundle / .mlmodelc directory, Apple's
    compiler's included) as a program."""
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):
        raise ArtifactError(f"{path} is neither a zip file nor a directory")
    try:
        files = _Files(path)
        names = set(files.names())
        roots = [n[: -len(COREMLDATA)] for n in names if n.endswith(COREMLDATA)]
        bundles = sorted(r for r in roots if r + "model.mil" in names)
        if bundles:
            return LoadedArtifact("mlmodelc", _compiled_program(files, bundles[0], names))
        if path.suffix == ".mlpackage" and path.is_dir():
            packages = [""]
        else:
            packages = sorted(
                {
                    str(PurePosixPath(n).parents[2])
                    for n in names
                    if n.endswith("/" + layout.MODEL_FILE)
                }
            )
        if packages:
            root = "" if packages[0] in ("", ".") else packages[0] + "/"
            weights = root + layout.PACKAGE_WEIGHT_FILE
            blob = files.read(weights) if weights in names else None
            return LoadedArtifact(
                "mlpackage", load_model(files.read(root + layout.MODEL_FILE), blob)
            )
        if layout.MIL_TEXT in names:
            weights = layout.MIL_WEIGHT_FILE
            blob = files.read(weights) if weights in names else None
            text = files.read(layout.MIL_TEXT).decode("utf-8", errors="strict")
            return LoadedArtifact("mil", parse_text(text, blob).program)
    except (MILParseError, MlmodelcError, UnicodeDecodeError, zipfile.BadZipFile, KeyError) as exc:
        raise ArtifactError(str(exc)) from None
    raise ArtifactError(f"{path} holds neither an .mlpackage, a model.mil nor an .mlmodelc")


def _compiled_program(files: _Files, root: str, names: set[str]) -> Program:
    """An .mlmodelc's program: the model it was compiled from, rebuilt (app/mlmodelc), with the
    bundle's weight file."""
    model, _, _ = source_model(files.read(root + COREMLDATA), files.read(root + "model.mil"),
                               where=root.rstrip("/") or ".")  # fmt: skip
    weights = root + "weights/weight.bin"
    return load_model(model, files.read(weights) if weights in names else None)
