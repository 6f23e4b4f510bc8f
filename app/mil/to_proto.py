"""The IR -> MIL protobuf (Model.mlmodel inside an .mlpackage), Core ML's own message classes.

Shaped the way coremltools serialises programs, the form Apple's compiler is known to accept:
every parameter is its own named const op, every op has a `name` attribute, blob-backed consts
carry a BlobFileValue whose offset is the blob's metadata offset, and the program has buildInfo.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import numpy as np

from app.language.messages import MIL_pb2 as pb
from app.language.messages import Model_pb2
from app.language.packing import pack_bits
from app.language.paths import WEIGHT_PATH
from app.language.targets import Target
from app.mil import ops
from app.mil.inline import InlinePlan, form, is_inline_value
from app.mil.ir import ConstValue, Function, Operation, Program, Var
from app.mil.types import DType, StateType, TensorType, ValueType


@cache
def _tensor_type(t: TensorType) -> pb.ValueType:
    """Cached: programs repeat a few types many times. Callers copy it into their messages."""
    vt = pb.ValueType()
    vt.tensorType.dataType = t.dtype.proto
    vt.tensorType.rank = t.rank
    for d in t.shape:
        vt.tensorType.dimensions.add().constant.size = d
    return vt


def _value_type(t: ValueType) -> pb.ValueType:
    if isinstance(t, StateType):
        vt = pb.ValueType()
        vt.stateType.wrappedType.CopyFrom(_tensor_type(t.tensor))
        return vt
    return _tensor_type(t)


def _set_immediate(val: pb.Value, t: TensorType, value) -> None:
    """Fill `val` with an inline value, in the TensorValue field the dtype table names (the one
    coremltools' reader and Apple's take it from). Messages are filled in place throughout:
    copying nested protobuf messages dominates otherwise. Programs repeat a few small values
    (strides, pads, names' types) many times: those are built once and merged in as bytes."""
    key = _small_key(t, value)
    if key is not None:
        known = _SMALL_VALUES.get(key)
        if known is None:
            _fill_immediate(val, t, value)
            if len(_SMALL_VALUES) < _SMALL_LIMIT:
                _SMALL_VALUES[key] = val.SerializeToString()
        else:
            val.MergeFromString(known)
        return
    _fill_immediate(val, t, value)


_SMALL_VALUES: dict[tuple, bytes] = {}
_SMALL_LIMIT, _SMALL_SIZE = 4096, 16


def _small_key(t: TensorType, value) -> tuple | None:
    if isinstance(value, str):
        return (t, value) if len(value) <= 64 else None
    if t.size > _SMALL_SIZE:
        return None
    return (t, np.asarray(value, dtype=t.dtype.numpy).tobytes())


def _fill_immediate(val: pb.Value, t: TensorType, value) -> None:
    val.type.CopyFrom(_tensor_type(t))
    tv = val.immediateValue.tensor
    field = t.dtype.field
    if field == "strings":
        tv.strings.values.append(str(value))
        return
    array = np.asarray(value, dtype=t.dtype.numpy).reshape(-1)
    if t.dtype.is_subbyte:
        tv.bytes.values = pack_bits(array, t.dtype)
    elif field == "bytes":  # little-endian
        tv.bytes.values = array.astype(array.dtype.newbyteorder("<")).tobytes()
    elif field == "bools":
        tv.bools.values.extend(bool(b) for b in array)
    elif field in ("floats", "doubles"):
        getattr(tv, field).values.extend(array.tolist())
    else:  # ints, longInts
        getattr(tv, field).values.extend(int(i) for i in array)


_STRING = TensorType(DType.STRING, ())


def _set_const(val: pb.Value, value: ConstValue, offset: int | None) -> None:
    if offset is None:
        _set_immediate(val, value.type, value.stored())
        return
    val.type.CopyFrom(_tensor_type(value.type))
    val.blobFileValue.fileName = WEIGHT_PATH
    val.blobFileValue.offset = offset


def _set_operation(
    out: pb.Operation, op: Operation, offsets: Mapping[str, int], target: Target
) -> None:
    out.type = op.type
    spelled = form(op, target)
    for arg in sorted(op.inputs):
        value = op.inputs[arg]
        for var in value if isinstance(value, tuple) else (value,):
            if spelled == "refs" or not is_inline_value(var):
                out.inputs[arg].arguments.add().name = var.name
                continue
            # A constexpr's const argument: its value in place (an attribute for the iOS16 forms)
            assert var.op is not None and var.op.value is not None
            val = (
                out.attributes[arg]
                if spelled == "attributes"
                else out.inputs[arg].arguments.add().value
            )
            _set_const(val, var.op.value, offsets.get(var.op.name))
    for var in op.outputs:
        out.outputs.add(name=var.name, type=_value_type(var.type))
    _set_immediate(out.attributes["name"], _STRING, op.name)
    if op.value is not None:
        _set_const(out.attributes["val"], op.value, offsets.get(op.name))


def _set_build_info(val: pb.Value, build_info: Mapping[str, str]) -> None:
    string_type = _tensor_type(_STRING)
    val.type.dictionaryType.keyType.CopyFrom(string_type)
    val.type.dictionaryType.valueType.CopyFrom(string_type)
    val.immediateValue.dictionary.SetInParent()  # present even when empty
    for k, v in sorted(build_info.items()):
        pair = val.immediateValue.dictionary.values.add()
        _set_immediate(pair.key, _STRING, k)
        _set_immediate(pair.value, _STRING, v)


def _feature(var: Var, description) -> None:
    t = var.tensor
    feature = description.add(name=var.name)
    array = (
        feature.type.stateType.arrayType
        if isinstance(var.type, StateType)
        else feature.type.multiArrayType
    )
    array.shape.extend(t.shape)
    array.dataType = t.dtype.feature_type


def _describe(fn, description) -> None:
    """Inputs, states and outputs of `fn` into a ModelDescription or FunctionDescription."""
    for var in fn.inputs:
        _feature(var, description.state if isinstance(var.type, StateType) else description.input)
    for var in fn.outputs:
        _feature(var, description.output)


def emit_proto(
    program: Program,
    offsets: Mapping[str, int],
    build_info: Mapping[str, str],
    metadata: Mapping[str, str] | None = None,
) -> Model_pb2.Model:
    """The Model message of an ML Program; `offsets` maps each blob-backed const's name to the
    metadata offset of its weight.bin entry."""
    model = Model_pb2.Model(specificationVersion=program.target.spec_version)
    if program.multifunction:  # as coremltools' multifunction save: per function, no top level
        for fn in program.functions.values():
            _describe(fn, model.description.functions.add(name=fn.name))
        model.description.defaultFunctionName = program.default
    else:
        _describe(program.main, model.description)
    for key, value in sorted((metadata or {}).items()):
        model.description.metadata.userDefined[key] = value

    model.mlProgram.CopyFrom(emit_program(program, offsets, build_info))
    return model


def emit_program(
    program: Program, offsets: Mapping[str, int], build_info: Mapping[str, str]
) -> pb.Program:
    """The Program message (what `model.mil` prints); `offsets` as for `emit_proto`."""
    mlp = pb.Program(version=1)
    opset = program.target.opset
    for fn in program.functions.values():
        fpb = mlp.functions[fn.name]
        fpb.opset = opset
        for var in fn.inputs:
            fpb.inputs.add(name=var.name, type=_value_type(var.type))
        block = fpb.block_specializations[opset]
        block.outputs.extend(v.name for v in fn.outputs)
        folded = InlinePlan.of(fn, program.target).folded
        for op in _written(fn):
            if op.name not in folded:
                _set_operation(block.operations.add(), op, offsets, program.target)
    _set_build_info(mlp.attributes["buildInfo"], build_info)
    return mlp


def _written(fn: Function) -> list[Operation]:
    """The function's ops as a program holds them: a coremltools dialect op (its record's
    `lowered`) as the ops it stands for."""
    lowered = [(op, ops.get(op.type)) for op in fn.operations]
    if all(record is None or record.lowered is None for _, record in lowered):
        return fn.operations
    read = {v for op in fn.operations for value in op.inputs.values() for v in _vars(value)}
    read |= set(fn.outputs)
    written: list[Operation] = []
    taken = {op.name for op in fn.operations}
    for op, record in lowered:
        if record is None or record.lowered is None:
            written.append(op)
        else:
            written += record.lowered(op, any(v in read for v in op.outputs), taken)
    return written


def _vars(value: Var | tuple[Var, ...]) -> tuple[Var, ...]:
    return value if isinstance(value, tuple) else (value,)
