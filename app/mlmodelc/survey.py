"""One walk over a function's ops collecting what the bundle's files need from them.

metadata.json needs the op histogram and the element types ops compute in and store; the
compiler needs every BLOBFILE reference to check it. Reading protobuf fields from Python is the
costly part of compiling, so all of it is gathered in a single pass (ops in program order,
nested blocks included, the histogram keyed in first-appearance order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.language.messages import MIL_pb2
from app.mlmodelc.blobrefs import BlobRef, op_place, refs_in_value
from app.mlmodelc.opnames import name_of
from app.mlmodelc.precision import DISPLAY, constexpr_storage, element_types, summary


@dataclass
class FunctionSurvey:
    histogram: dict[str, int] = field(default_factory=dict)
    compute_types: set[int] = field(default_factory=set)
    storage: set[str] = field(default_factory=set)
    refs: list[BlobRef] = field(default_factory=list)
    unobserved: list[str] = field(default_factory=list)  # histogram names chosen by rule only

    @property
    def compute_precision(self) -> str | None:
        return summary({DISPLAY[c] for c in self.compute_types if c in DISPLAY})

    @property
    def storage_precision(self) -> str | None:
        return summary(self.storage)


def _codes(vt: MIL_pb2.ValueType) -> tuple[int, ...]:
    if vt.WhichOneof("type") == "tensorType":
        return (vt.tensorType.dataType,)
    return tuple(element_types(vt))


class _Walk:
    def __init__(self, opset: str, place: str) -> None:
        self.opset = opset
        self.place = place
        self.result = FunctionSurvey()
        self.codes: dict[str, tuple[int, ...]] = {}  # variable -> element types
        self.const_types: dict[str, MIL_pb2.ValueType] = {}  # const output -> its type
        self.names: dict[str, str] = {}  # op type -> display name

    def function_inputs(self, values) -> None:
        for v in values:
            self.codes[v.name] = _codes(v.type)

    def block(self, block: MIL_pb2.Block, place: tuple[str, ...]) -> None:
        self.function_inputs(block.inputs)
        for op in block.operations:
            self.operation(op, place)

    def operation(self, op: MIL_pb2.Operation, place: tuple[str, ...]) -> None:
        kind = op.type
        result = self.result
        outputs = op.outputs
        for out in outputs:
            self.codes[out.name] = _codes(out.type)
        if kind == "const":
            val = op.attributes.get("val")
            if val is not None and val.WhichOneof("value") == "blobFileValue":
                result.storage.update(DISPLAY[c] for c in element_types(val.type) if c in DISPLAY)
                result.refs.extend(refs_in_value(val, (*place, op_place(op), "attribute val")))
            if outputs:
                self.const_types[outputs[0].name] = outputs[0].type
            return
        name = self.names.get(kind)
        if name is None:
            found = name_of(kind, self.opset)
            name = self.names[kind] = found.name
            if not found.observed:
                result.unobserved.append(name)
        result.histogram[name] = result.histogram.get(name, 0) + 1
        computes = not kind.startswith("constexpr_")
        if not computes:
            storage = constexpr_storage(op, self.const_types)
            if storage:
                result.storage.add(storage)
        else:
            for out in outputs:
                result.compute_types.update(self.codes[out.name])
        for arg_name, arg in op.inputs.items():
            for binding in arg.arguments:
                if binding.WhichOneof("binding") == "name":
                    if computes:
                        result.compute_types.update(self.codes.get(binding.name, ()))
                else:
                    value = binding.value
                    if computes:
                        result.compute_types.update(_codes(value.type))
                    if _may_hold_blobs(value):
                        place_here = (*place, op_place(op), f"input {arg_name}")
                        result.refs.extend(refs_in_value(value, place_here))
        for attr_name, value in op.attributes.items():
            if attr_name != "name" and _may_hold_blobs(value):
                place_here = (*place, op_place(op), f"attribute {attr_name}")
                result.refs.extend(refs_in_value(value, place_here))
        for inner in op.blocks:
            self.block(inner, (*place, op_place(op)))


def _may_hold_blobs(value: MIL_pb2.Value) -> bool:
    """A BLOBFILE, or a tuple/list/dictionary that could hold one (not a plain tensor)."""
    if value.WhichOneof("value") == "blobFileValue":
        return True
    return value.immediateValue.WhichOneof("value") not in ("tensor", None)


def survey_function(name: str, fn: MIL_pb2.Function) -> FunctionSurvey:
    """Histogram, element types and BLOBFILE references of `fn`'s block for its opset."""
    place = f"function {name}"
    walk = _Walk(fn.opset, place)
    walk.function_inputs(fn.inputs)
    for attr_name, value in fn.attributes.items():
        walk.result.refs.extend(refs_in_value(value, (place, f"attribute {attr_name}")))
    block = fn.block_specializations[fn.opset]
    walk.block(block, (place,))
    return walk.result


def survey_program(program: MIL_pb2.Program) -> dict[str, FunctionSurvey]:
    return {
        name: survey_function(name, program.functions[name]) for name in sorted(program.functions)
    }
