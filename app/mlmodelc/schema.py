"""metadata.json's input/output/state schema entries, from the ModelDescription's features.

Seen in the goldens and other Apple-compiled bundles: a multi-array feature is
`{hasShapeFlexibility, isOptional, dataType, formattedType, shortDescription, shape, name, type}`,
`formattedType` = `MultiArray (Float32 1 × 576)` (`MultiArray (Float32)` with no shape),
`shape` = `[1, 576]`; a feature with a shape range adds `shapeFlexibility` (`1 × 2...4000`, a
fixed dimension written once) and `shapeRange` (`[[1, 1], [2, 4000]]`), its `shape` and
`formattedType` giving the default shape. Array types: FLOAT32 `Float32`, FLOAT16 `Float16`,
DOUBLE `Double`, INT32 `Int32` (INT8 `Int8` unverified).

Not seen, refused with `UnsupportedConstructError`: enumerated shapes and feature types other
than multi-arrays and states. A state feature (`type` `State`, `formattedType`
`State (Float16 1 × 4)`, with the array's other keys) is this writer's guess.

Each entry's keys are inserted in the order (`FIXED_KEYS` / `FLEXIBLE_KEYS`) that makes the
NSDictionary come out as Apple's does; Apple builds the two kinds in different orders.
"""

from __future__ import annotations

from app.language.errors import UnsupportedConstructError
from app.language.messages import FeatureTypes_pb2, Model_pb2

A = FeatureTypes_pb2.ArrayFeatureType
ARRAY_TYPES = {
    A.FLOAT32: "Float32",
    A.FLOAT16: "Float16",
    A.DOUBLE: "Double",
    A.INT32: "Int32",
    A.INT8: "Int8",
}

FIXED_KEYS = (
    "name",
    "dataType",
    "shape",
    "isOptional",
    "hasShapeFlexibility",
    "shortDescription",
    "type",
    "formattedType",
)
FLEXIBLE_KEYS = (
    "name",
    "type",
    "shape",
    "dataType",
    "hasShapeFlexibility",
    "isOptional",
    "shapeFlexibility",
    "shapeRange",
    "formattedType",
    "shortDescription",
)


def _dims(values) -> str:
    return " × ".join(str(v) for v in values)


def _range_text(lower: int, upper: int) -> str:
    return str(lower) if lower == upper else f"{lower}...{upper}"


def feature_entry(feature: Model_pb2.FeatureDescription, where: str) -> dict[str, str]:
    kind = feature.type.WhichOneof("Type")
    where = f"{where}, feature {feature.name}"
    if kind == "multiArrayType":
        array, label = feature.type.multiArrayType, "MultiArray"
    elif kind == "stateType":
        array, label = feature.type.stateType.arrayType, "State"
    else:
        raise UnsupportedConstructError(
            f"feature type {kind!r}: Apple's metadata.json spelling for it has not been observed",
            where,
        )
    data_type = ARRAY_TYPES.get(array.dataType)
    if data_type is None:
        raise UnsupportedConstructError(f"array data type {array.dataType}", where)
    flexibility = array.WhichOneof("ShapeFlexibility")
    if flexibility == "enumeratedShapes":
        raise UnsupportedConstructError(
            "enumerated shapes: Apple's metadata.json spelling for them has not been observed",
            where,
        )
    shape = list(array.shape)
    formatted = f"{label} ({data_type} {_dims(shape)})" if shape else f"{label} ({data_type})"
    values = {
        "name": feature.name,
        "type": label,
        "shape": "[" + ", ".join(str(v) for v in shape) + "]",
        "dataType": data_type,
        "isOptional": "1" if feature.type.isOptional else "0",
        "formattedType": formatted,
        "shortDescription": feature.shortDescription,
    }
    if flexibility == "shapeRange":
        ranges = [(r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges]
        values["hasShapeFlexibility"] = "1"
        values["shapeFlexibility"] = " × ".join(_range_text(lo, hi) for lo, hi in ranges)
        values["shapeRange"] = "[" + ", ".join(f"[{lo}, {hi}]" for lo, hi in ranges) + "]"
        return {k: values[k] for k in FLEXIBLE_KEYS}
    values["hasShapeFlexibility"] = "0"
    return {k: values[k] for k in FIXED_KEYS}
