"""An ONNX model -> one MIL program: `import_onnx`, what the artifact builder calls for a request
of kind onnx.

    read (bounded, checked) -> fix input shapes -> lower node by node -> name the outputs

Inputs keep their ONNX names where those are valid service names, else sanitized
(app/onnx/names.py); float inputs are fp16 (or fp32, cast to fp16 on the way in, with
`io_dtype: fp32`), integer inputs int32. Dynamic axes take their sizes from `shapes`; one left
unknown is refused naming the input, the axis and its symbolic name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from app.core.toolchain import ONNX_IMPORTER_VERSION
from app.errors import RequestError
from app.kernels.compressed import CompressingBuilder
from app.language.targets import Target
from app.mil import DType, MILBuildError, Var, get_target
from app.mil.ceilings import Ceilings
from app.onnx.build import OnnxBuild, OnnxFunctionsBuild, OnnxIO
from app.onnx.files import ModelFiles
from app.onnx.lowering import Handler, Lowering, lower
from app.onnx.names import io_names
from app.onnx.ops_einsum import HANDLERS as EINSUM
from app.onnx.ops_index import HANDLERS as INDEX
from app.onnx.ops_layout import HANDLERS as LAYOUT
from app.onnx.ops_logic import HANDLERS as LOGIC
from app.onnx.ops_math import HANDLERS as MATH
from app.onnx.ops_nn import HANDLERS as NN
from app.onnx.ops_quant import HANDLERS as QUANT
from app.onnx.ops_roi import HANDLERS as ROI
from app.onnx.ops_spatial import HANDLERS as SPATIAL
from app.onnx.params import OnnxParams
from app.onnx.patterns import gelu_patterns
from app.onnx.reader import GraphInput, OnnxModel, ReadLimits, read_model
from app.onnx.tensors import FLOAT_TYPES, type_name
from app.quantize import QuantizeConfig

HANDLERS: dict[str, Handler] = {
    **MATH,
    **LOGIC,
    **LAYOUT,
    **INDEX,
    **NN,
    **SPATIAL,
    **ROI,
    **EINSUM,
    **QUANT,
}
_INTS = (
    TensorProto.INT64,
    TensorProto.INT32,
    TensorProto.INT16,
    TensorProto.INT8,
    TensorProto.UINT8,
)


def import_onnx(
    params: OnnxParams,
    files: ModelFiles,
    *,
    target: Target,
    name: str,
    ceilings: Ceilings = Ceilings(),
    limits: ReadLimits = ReadLimits(),
    quantize: QuantizeConfig | None = None,
    model: OnnxModel | None = None,
) -> OnnxBuild:
    """One program of the model, its input shapes `params.shapes` (one size per axis); `model`
    the model read already (several functions read its weights once)."""
    model = model if model is not None else read_model(files, limits)
    graph_inputs = {i.name for i in model.inputs}
    for given in params.shapes:
        if given not in graph_inputs:
            raise RequestError(
                f"shapes.{given}",
                f"the model has no input {given!r} (its inputs: {', '.join(sorted(graph_inputs))})",
            )
    names = io_names([i.name for i in model.inputs], model.outputs)
    b = CompressingBuilder(target, ceilings=ceilings)
    lowering = Lowering(model, b, HANDLERS, quantize=quantize)
    fp32 = params.io_dtype == "fp32"
    inputs = tuple(_input(lowering, i, names[i.name], params, fp32) for i in model.inputs)
    out_types = {v.name: v.type.tensor_type.elem_type for v in model.graph.output}
    planned = {
        out: names[out] + ("_fp16" if fp32 and out_types[out] in FLOAT_TYPES else "")
        for out in model.outputs
        if out not in graph_inputs
    }
    _bind_initializers(lowering)
    replaced, skipped = gelu_patterns(model)
    lower(lowering, planned, replaced, skipped)
    outputs = []
    results = []
    for out in model.outputs:
        var = _output(
            lowering, out, names[out], fp32 and out_types[out] in FLOAT_TYPES, graph_inputs
        )
        results.append(var)
        outputs.append(OnnxIO(out, var.name, out_types[out], var.tensor.shape))
    try:
        program = b.build(results)
    except MILBuildError as exc:
        raise RequestError("outputs", str(exc)) from None
    about = {
        "model": files.model,
        "opset": model.opset,
        "ir_version": model.proto.ir_version,
        "producer": f"{model.proto.producer_name} {model.proto.producer_version}".strip(),
        "importer": ONNX_IMPORTER_VERSION,
        "onnx": onnx.__version__,
        "io_dtype": params.io_dtype,
    }
    return OnnxBuild(
        params=params,
        target=b.target,
        name=name,
        program=program,
        weights=lowering.weights,
        files=files,
        inputs=inputs,
        outputs=tuple(outputs),
        consts=lowering.consts,
        quantized=lowering.quantized,
        origin=lowering.origin,
        about=about,
    )


def _bind_initializers(lowering: Lowering) -> None:
    """Initializers are known values: read now (external data by offset, floats as fp16)."""
    for name in lowering.model.initializers:
        lowering.values[name] = lowering.model.value(name)


def _input(
    lowering: Lowering, given: GraphInput, name: str, params: OnnxParams, fp32: bool
) -> OnnxIO:
    where = f"shapes.{given.name}"
    fixed = params.shapes.get(given.name)
    if fixed is not None:
        if len(fixed) != len(given.dims):
            raise RequestError(
                where, f"input {given.name!r} has rank {len(given.dims)}, not {len(fixed)}"
            )
        for axis, (dim, size) in enumerate(zip(given.dims, fixed, strict=True)):
            if isinstance(dim, int) and dim > 0 and dim != size:
                raise RequestError(
                    where, f"input {given.name!r} axis {axis} is {dim} in the model, not {size}"
                )
        shape = tuple(d for d in fixed if isinstance(d, int))  # one size per axis here
    else:
        for axis, dim in enumerate(given.dims):
            if not isinstance(dim, int) or dim <= 0:
                symbol = f" ({dim!r})" if isinstance(dim, str) else ""
                example = ",".join(
                    str(d) if isinstance(d, int) and d > 0 else "N" for d in given.dims
                )
                raise RequestError(
                    where,
                    f"input {given.name!r} axis {axis} is dynamic{symbol}: fix its size "
                    f"(--shape {given.name}={example})",
                )
        shape = tuple(d for d in given.dims if isinstance(d, int))  # each checked above
    elem = given.elem_type
    if elem in FLOAT_TYPES:
        dtype = DType.FP32 if fp32 else DType.FP16
    elif elem in _INTS:
        dtype = DType.INT32
    else:
        raise RequestError(
            f"inputs.{given.name}",
            f"input {given.name!r} is {type_name(elem)}; a program takes float or integer inputs",
        )
    b = lowering.b
    try:
        var: Var = b.input(name, dtype, shape)
    except MILBuildError as exc:
        raise RequestError(f"inputs.{given.name}", str(exc)) from None
    value = var
    if dtype is DType.FP32:
        value = b.op("cast", b.unique(f"{name}_fp16"), x=var, dtype="fp16")
    lowering.values[given.name] = value
    return OnnxIO(given.name, name, elem, shape, _id_range(lowering.model, given.name))


def _id_range(model: OnnxModel, name: str) -> int | None:
    """The rows of the table an integer input indexes (a Gather of an initializer by it,
    directly or through a Cast), so verification draws ids within it."""
    reads = {name}
    for node in model.nodes:
        if (
            node.op_type in ("Cast", "Unsqueeze", "Reshape")
            and node.input
            and node.input[0] in reads
        ):
            reads.add(node.output[0])
    sizes = []
    for node in model.nodes:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in reads:
            table = model.initializers.get(node.input[0])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            # an axis the table lacks is the Gather's own fault, refused when it is lowered
            if table is not None and -len(table.dims) <= axis < len(table.dims):
                sizes.append(int(table.dims[axis]))
    return min(sizes) if sizes else None


def _output(lowering: Lowering, onnx_name: str, name: str, to_fp32: bool, inputs: set[str]) -> Var:
    value = lowering.values.get(onnx_name)
    if isinstance(value, np.ndarray) or value is None:
        raise RequestError(
            f"outputs.{onnx_name}",
            f"output {onnx_name!r} does not depend on the inputs (it is a constant); a program "
            "computes its outputs",
        )
    if onnx_name in inputs:  # a graph input listed as an output: one name, two roles
        raise RequestError(
            f"outputs.{onnx_name}",
            f"output {onnx_name!r} is an input unchanged; a program computes its outputs",
        )
    b = lowering.b
    if to_fp32:
        return b.op("cast", name, x=value, dtype="fp32")
    if value.name == name:
        return value
    # the output is another value unchanged (an Identity of a computed value): one op names it
    return b.op("reshape", name, x=value, shape=list(value.tensor.shape))


def onnx_program(
    params: OnnxParams,
    paths: dict[str, Path],
    *,
    target: str,
    name: str,
    ceilings: Ceilings = Ceilings(),
    limits: ReadLimits = ReadLimits(),
    quantize: QuantizeConfig | None = None,
) -> OnnxBuild:
    """The program of an ONNX request (the request's one entry here): its files, each a file on
    this machine by the name it was given under, the model among them."""
    files = ModelFiles.of_uploads(params.model, paths)
    functions = params.functions()
    options = {
        "target": get_target(target),
        "name": name,
        "ceilings": ceilings,
        "limits": limits,
        "quantize": quantize,
    }
    # options holds values of several types, each the one its keyword takes
    if list(functions) == ["main"]:
        return import_onnx(params, files, **options)  # type: ignore[arg-type]
    if not get_target(target).multifunction:
        raise RequestError(
            "shapes", "several sizes of an axis make a package of functions, which needs ios18"
        )
    model = read_model(files, limits)  # one read: every function holds the same weights
    parts = {  # options: as above
        fn: import_onnx(params.model_copy(update={"shapes": shapes}), files, model=model, **options)  # type: ignore[arg-type]
        for fn, shapes in functions.items()
    }
    return OnnxFunctionsBuild.of(params, parts)
