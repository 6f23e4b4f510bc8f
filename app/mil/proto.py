"""The MIL protobuf emitter (Model.mlmodel inside an .mlpackage), through coremltools' own classes.

Shaped the way coremltools serialises programs, the form Apple's compiler is known to accept:
every parameter is its own named const op, every op has a `name` attribute, blob-backed consts
carry a BlobFileValue whose offset is the blob's metadata offset, and the program has buildInfo.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from coremltools.proto import MIL_pb2 as pb
from coremltools.proto import Model_pb2

from app.mil.ir import ConstValue, Operation, Program, Var
from app.mil.text import WEIGHT_PATH
from app.mil.types import DType, StateType, TensorType, ValueType


def _tensor_type(t: TensorType) -> pb.ValueType:
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


def _immediate(t: TensorType, value) -> pb.Value:
    """An inline value, using the TensorValue field coremltools reads for each dtype."""
    val = pb.Value(type=_tensor_type(t))
    tv = val.immediateValue.tensor
    if t.dtype is DType.STRING:
        tv.strings.values.append(str(value))
        return val
    array = np.asarray(value, dtype=t.dtype.numpy).reshape(-1)
    if t.dtype in (DType.FP16, DType.INT8, DType.UINT8):
        tv.bytes.values = array.tobytes()
    elif t.dtype is DType.FP32:
        tv.floats.values.extend(array.tolist())
    elif t.dtype is DType.FP64:
        tv.doubles.values.extend(array.tolist())
    elif t.dtype is DType.BOOL:
        tv.bools.values.extend(bool(b) for b in array)
    elif t.dtype in (DType.INT64, DType.UINT64):
        tv.longInts.values.extend(int(i) for i in array)
    else:
        tv.ints.values.extend(int(i) for i in array)
    return val


def _string(text: str) -> pb.Value:
    return _immediate(TensorType(DType.STRING, ()), text)


def _const_value(value: ConstValue, offset: int | None) -> pb.Value:
    if offset is None:
        return _immediate(value.type, value.stored())
    return pb.Value(
        type=_tensor_type(value.type),
        blobFileValue=pb.Value.BlobFileValue(fileName=WEIGHT_PATH, offset=offset),
    )


def _operation(op: Operation, offsets: Mapping[str, int]) -> pb.Operation:
    out = pb.Operation(type=op.type)
    for arg in sorted(op.inputs):
        value = op.inputs[arg]
        for var in value if isinstance(value, tuple) else (value,):
            out.inputs[arg].arguments.add().name = var.name
    for var in op.outputs:
        out.outputs.add(name=var.name, type=_value_type(var.type))
    out.attributes["name"].CopyFrom(_string(op.name))
    if op.value is not None:
        out.attributes["val"].CopyFrom(_const_value(op.value, offsets.get(op.name)))
    return out


def _build_info(build_info: Mapping[str, str]) -> pb.Value:
    string_type = pb.ValueType()
    string_type.tensorType.dataType = pb.DataType.STRING
    val = pb.Value()
    val.type.dictionaryType.keyType.CopyFrom(string_type)
    val.type.dictionaryType.valueType.CopyFrom(string_type)
    for k, v in sorted(build_info.items()):
        pair = val.immediateValue.dictionary.values.add()
        pair.key.CopyFrom(_string(k))
        pair.value.CopyFrom(_string(v))
    return val


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


def emit_proto(
    program: Program,
    offsets: Mapping[str, int],
    build_info: Mapping[str, str],
    metadata: Mapping[str, str] | None = None,
) -> Model_pb2.Model:
    """The Model message of an ML Program; `offsets` as for `emit_text`."""
    model = Model_pb2.Model(specificationVersion=program.target.spec_version)
    main = program.main
    for var in main.inputs:
        _feature(
            var,
            model.description.state if isinstance(var.type, StateType) else model.description.input,
        )
    for var in main.outputs:
        _feature(var, model.description.output)
    for key, value in sorted((metadata or {}).items()):
        model.description.metadata.userDefined[key] = value

    mlp = model.mlProgram
    mlp.version = 1
    opset = program.target.opset
    for fn in program.functions.values():
        fpb = mlp.functions[fn.name]
        fpb.opset = opset
        for var in fn.inputs:
            fpb.inputs.add(name=var.name, type=_value_type(var.type))
        block = fpb.block_specializations[opset]
        block.outputs.extend(v.name for v in fn.outputs)
        block.operations.extend(_operation(op, offsets) for op in fn.operations)
    mlp.attributes["buildInfo"].CopyFrom(_build_info(build_info))
    return model
