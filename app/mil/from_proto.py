"""MIL protobuf -> the IR: the ML Program of an `.mlpackage` (or of parsed `model.mil` text),
rebuilt op by op through the builder (`app.mil.assemble`), so every type is inferred again and
compared with the declared one, and every BLOBFILE const is read back from weight.bin.

`load_model` takes a Model message (its specification version names the target);
`load_program` a Program message (its functions' opset names it), which is what the language
layer's parser returns for `model.mil` text.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.language.dialect import OPSET_TEXT
from app.language.messages import MIL_pb2 as pb
from app.language.messages import Model_pb2
from app.language.packing import unpack_bits
from app.language.parser import FunctionLines
from app.language.targets import TARGETS, Target
from app.mil.assemble import Assembler, MILParseError, ParsedProgram, WeightFile, WeightSource
from app.mil.ir import ConstValue, Function, Program
from app.mil.types import DType, StateType, TensorType, ValueType


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
    dtype = DType.from_proto(tt.dataType)
    if dtype is None or dtype.is_raw_float:
        raise MILParseError(where, f"unsupported MIL.proto data type {tt.dataType}")
    dims = []
    for d in tt.dimensions:
        if d.WhichOneof("dimension") != "constant":
            raise MILParseError(where, "unknown dimensions are not supported")
        dims.append(d.constant.size)
    if len(dims) != tt.rank:
        raise MILParseError(where, f"rank {tt.rank} with {len(dims)} dimensions")
    return TensorType(dtype, tuple(dims))


def _immediate(val: pb.Value, t: TensorType, where: str) -> ConstValue:
    tv = val.immediateValue.tensor
    field = tv.WhichOneof("value")
    if t.dtype is DType.STRING:
        if field != "strings" or len(tv.strings.values) != 1:
            raise MILParseError(where, "a string const needs exactly one string")
        return ConstValue(tv.strings.values[0], t)
    if field == "bytes" and t.dtype.is_subbyte:
        try:
            data = unpack_bits(tv.bytes.values, t.dtype, t.size)
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


def _function(
    name: str,
    fn: pb.Function,
    target: Target,
    weights: WeightFile,
    offsets: dict[str, int],
    lines: FunctionLines | None,
) -> Function:
    head = f"line {lines.head}" if lines else f"function {name}"
    if fn.opset != target.opset:
        raise MILParseError(head, f"opset {fn.opset!r}, expected {target.opset!r}")
    asm = Assembler(target, name, weights)
    for param in fn.inputs:
        where = head if lines else f"input {param.name!r}"
        asm.param(where, param.name, _value_type(param.type, where))
    block = fn.block_specializations[fn.opset]
    for index, op in enumerate(block.operations):
        op_name = _name(op, f"operation {index} ({op.type})")
        where = f"line {lines.operations[index]}" if lines else f"op {op_name!r}"
        outputs = [(o.name, _value_type(o.type, where)) for o in op.outputs]
        if op.type == "const":
            if len(outputs) != 1 or op.inputs or "val" not in op.attributes:
                raise MILParseError(where, "a const needs one output, a val and no inputs")
            if outputs[0][0] != op_name:
                raise MILParseError(where, f"const output {outputs[0][0]!r} differs from its name")
            val = op.attributes["val"]
            declared = _value_type(val.type, where)
            if not isinstance(declared, TensorType) or declared != outputs[0][1]:
                raise MILParseError(
                    where, f"const {op_name!r} is declared {outputs[0][1]}, value is {declared}"
                )
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
    function = asm.finish(head, list(block.outputs))
    offsets.update(asm.offsets)
    return function


def _inline(asm: Assembler, where: str, op_type: str, op_name: str, arg: str, val: pb.Value) -> str:
    declared = _value_type(val.type, where)
    if not isinstance(declared, TensorType):
        raise MILParseError(where, f"argument {arg!r}: a value must be a tensor")
    if val.WhichOneof("value") == "blobFileValue":
        blob = (val.blobFileValue.fileName, val.blobFileValue.offset)
        return asm.inline(where, op_type, op_name, arg, declared, blob=blob)
    return asm.inline(where, op_type, op_name, arg, declared, _immediate(val, declared, where))


def _build_info(program: pb.Program, where: str) -> dict[str, str]:
    """The program's buildInfo dictionary of strings (empty when it has none)."""
    if "buildInfo" not in program.attributes:
        return {}
    value = program.attributes["buildInfo"]
    info = {}
    for pair in value.immediateValue.dictionary.values:
        keys, values = pair.key.immediateValue.tensor, pair.value.immediateValue.tensor
        if len(keys.strings.values) != 1 or len(values.strings.values) != 1:
            raise MILParseError(where, "buildInfo must map strings to strings")
        info[keys.strings.values[0]] = values.strings.values[0]
    return info


def load_program(
    program: pb.Program,
    target: Target,
    weights: WeightSource = None,
    default: str = "main",
    lines: Mapping[str, FunctionLines] | None = None,
) -> ParsedProgram:
    """The IR of a Program message whose functions target `target`; `default` names the function
    run when none is named (model.mil names none: main, else the first function). With the `lines`
    the text parser recorded, errors name the line instead of the op."""
    reader = WeightFile(weights)
    offsets: dict[str, int] = {}
    functions = {
        name: _function(name, fn, target, reader, offsets, (lines or {}).get(name))
        for name, fn in sorted(program.functions.items())
    }
    if not functions:
        raise MILParseError("program", "the program has no function")
    if default not in functions:
        raise MILParseError("program", f"the program has no {default} function")
    return ParsedProgram(
        Program(target, functions, default), offsets, _build_info(program, "program buildInfo")
    )


def target_of_opset(program: pb.Program, where: str = "program") -> Target:
    """The one target every function of `program` is written for."""
    opsets = {fn.opset for fn in program.functions.values()}
    by_opset = {t.opset: t for t in TARGETS.values()}
    if len(opsets) > 1:
        raise MILParseError(
            "program", f"functions of different opsets: {', '.join(sorted(opsets))}"
        )
    (opset,) = opsets or {""}
    if opset not in by_opset:
        raise MILParseError(where, f"unsupported target {OPSET_TEXT.get(opset, opset)!r}")
    return by_opset[opset]


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
    default = model.description.defaultFunctionName or "main"  # set in multifunction packages
    return load_program(model.mlProgram, target, weights, default).program
