"""metadata.json's `computePrecision` and `storagePrecision`: the rules and type names
(`survey` applies them to a function's ops).

Rules that reproduce every Apple-compiled metadata.json at hand (15 bundles):

- compute: the element types of the inputs and outputs of every op except `const` and the
  `constexpr_*` ops, leaving out `bool` and `string` (a `less` producing bool, a `cast` taking a
  string `dtype`, add nothing);
- storage: each `const` whose value is a BLOBFILE contributes its type; each `constexpr_*` op
  contributes what it decompresses from (its record's `decompresses`, app/mil/ops): the type of
  its integers for affine dequantisation (`Int8`/`UInt8`), `Palettized (N bits)` for a look-up
  table of 2^N entries, `Sparse` for sparse_to_dense (their scale, zero-point, mask and table
  operands add nothing). Inline constants add nothing.
- one type is written by name, several as `Mixed (A, B, ...)` sorted by name; nothing at all
  leaves the key out.

Names seen: Float16, Float32, Int8, Int16, Int32, UInt16. Others follow the pattern (Float64,
Int64, UInt8, ..., Int4, UInt1..UInt6, BFloat16, Float8E4M3FN, Float8E5M2), unverified, as are
the iOS18 constexpr ops (blockwise_shift_scale: its data type; lut_to_dense with sub-byte
indices: the index width; cast: its source type; the sparse variants: Sparse).
"""

from __future__ import annotations

from collections.abc import Iterator

from app.language.elements import SUB_BYTE_BITS
from app.language.messages import MIL_pb2
from app.mil import ops

D = MIL_pb2

DISPLAY = {
    D.FLOAT16: "Float16",
    D.FLOAT32: "Float32",
    D.FLOAT64: "Float64",
    D.BFLOAT16: "BFloat16",
    D.FLOAT8E4M3FN: "Float8E4M3FN",
    D.FLOAT8E5M2: "Float8E5M2",
    D.INT4: "Int4",
    D.INT8: "Int8",
    D.INT16: "Int16",
    D.INT32: "Int32",
    D.INT64: "Int64",
    D.UINT1: "UInt1",
    D.UINT2: "UInt2",
    D.UINT3: "UInt3",
    D.UINT4: "UInt4",
    D.UINT6: "UInt6",
    D.UINT8: "UInt8",
    D.UINT16: "UInt16",
    D.UINT32: "UInt32",
    D.UINT64: "UInt64",
}


def summary(names: set[str]) -> str | None:
    if not names:
        return None
    ordered = sorted(names)
    return ordered[0] if len(ordered) == 1 else f"Mixed ({', '.join(ordered)})"


def element_types(vt: MIL_pb2.ValueType) -> Iterator[int]:
    kind = vt.WhichOneof("type")
    if kind == "tensorType":
        yield vt.tensorType.dataType
    elif kind == "stateType":
        yield from element_types(vt.stateType.wrappedType)
    elif kind == "listType":
        yield from element_types(vt.listType.type)
    elif kind == "tupleType":
        for t in vt.tupleType.types:
            yield from element_types(t)
    elif kind == "dictionaryType":
        yield from element_types(vt.dictionaryType.keyType)
        yield from element_types(vt.dictionaryType.valueType)


def _operand(op: MIL_pb2.Operation, name: str) -> MIL_pb2.ValueType | None:
    """The type of a constexpr operand, held as an attribute (iOS16/17) or an input (iOS18)."""
    if name in op.attributes:
        return op.attributes[name].type
    if name in op.inputs and op.inputs[name].arguments:
        binding = op.inputs[name].arguments[0]
        if binding.WhichOneof("binding") == "value":
            return binding.value.type
    return None


def constexpr_storage(op: MIL_pb2.Operation, symbols: dict[str, MIL_pb2.ValueType]) -> str | None:
    """What a constexpr op decompresses from (its storagePrecision name); `symbols` gives the
    types of the consts its operands name (iOS18 passes operands as inputs)."""

    def dtype_of(name: str) -> int | None:
        vt = _operand(op, name)
        if vt is None and name in op.inputs and op.inputs[name].arguments:
            vt = symbols.get(op.inputs[name].arguments[0].name)
        return vt.tensorType.dataType if vt is not None and vt.HasField("tensorType") else None

    record = ops.get(op.type)
    decompresses = record.decompresses if record is not None else None
    if decompresses is not None:
        kind: str | None = decompresses.kind
    else:  # an op no record knows: what its name says (Apple's sparse ones are `*sparse*`)
        kind = "sparse" if "sparse" in op.type else None
    if kind == "sparse":
        return "Sparse"
    if kind == "palette":
        indices = dtype_of("indices")
        if indices in SUB_BYTE_BITS:
            return f"Palettized ({SUB_BYTE_BITS[indices]} bits)"
        lut = _operand(op, "lut")
        if lut is None and "lut" in op.inputs and op.inputs["lut"].arguments:
            lut = symbols.get(op.inputs["lut"].arguments[0].name)
        if lut is not None and lut.HasField("tensorType") and lut.tensorType.dimensions:
            dims = lut.tensorType.dimensions
            # iOS16: a table of 2^N scalars; iOS18: [..., 2^N, vector size]
            entries = dims[0].constant.size if len(dims) == 1 else dims[-2].constant.size
            return f"Palettized ({max(entries - 1, 1).bit_length()} bits)"
        return "Palettized"
    source = decompresses.source if decompresses is not None else None
    code = dtype_of(source) if source else None
    return DISPLAY.get(code) if code is not None else None
