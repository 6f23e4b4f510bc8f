"""Attributes the compiler adds to the program it prints: buildInfo and FlexibleShapeInformation.

buildInfo: the source program's entries plus the profile's `coremlc-*` entries (goldens: the
entries are printed sorted by key; a source without buildInfo gets one with only the compiler's
two entries).

FlexibleShapeInformation (profiles that write it, see `profiles`): for a function whose inputs
have a shape range in the ModelDescription, `(("DefaultShapes", {{input, default shape}}),
("RangeDims", {{input, [[lower, upper], ...]}}))`, typed
`tuple<tuple<string, dict<string, tensor<int32, [?]>>>, tuple<string, dict<string,
list<tensor<int32, [2]>, ?>>>>` (goldens 3520 and 3600). An unbounded upper bound (-1 in the
description) is written as -1: no golden shows one. Enumerated shapes are refused: no golden shows
how Apple spells them.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.language.errors import UnsupportedConstructError
from app.language.messages import MIL_pb2, Model_pb2

D = MIL_pb2


def _string_type(vt: MIL_pb2.ValueType) -> None:
    vt.tensorType.dataType = D.STRING


def _string(value: MIL_pb2.Value, text: str) -> None:
    _string_type(value.type)
    value.immediateValue.tensor.strings.values.append(text)


def _int_tensor(vt: MIL_pb2.ValueType, size: int | None) -> None:
    t = vt.tensorType
    t.dataType = D.INT32
    t.rank = 1
    dim = t.dimensions.add()
    if size is None:
        dim.unknown.variadic = False
    else:
        dim.constant.size = size


def build_info_entries(program: MIL_pb2.Program) -> dict[str, str]:
    """The program's buildInfo as a dict (empty when it has none)."""
    if "buildInfo" not in program.attributes:
        return {}
    out: dict[str, str] = {}
    for kv in program.attributes["buildInfo"].immediateValue.dictionary.values:
        key = kv.key.immediateValue.tensor.strings.values
        val = kv.value.immediateValue.tensor.strings.values
        if key and val:
            out[key[0]] = val[0]
    return out


def build_info_value(entries: Mapping[str, str]) -> MIL_pb2.Value:
    """A `dict<string, string>` Value holding `entries`, sorted by key."""
    value = MIL_pb2.Value()
    _string_type(value.type.dictionaryType.keyType)
    _string_type(value.type.dictionaryType.valueType)
    value.immediateValue.dictionary.SetInParent()
    for key in sorted(entries):
        kv = value.immediateValue.dictionary.values.add()
        _string(kv.key, key)
        _string(kv.value, entries[key])
    return value


def build_info(program: MIL_pb2.Program, additions: Mapping[str, str]) -> MIL_pb2.Value:
    """The program's buildInfo with `additions` set (they replace entries of the same key)."""
    return build_info_value({**build_info_entries(program), **additions})


def _features(
    description: Model_pb2.ModelDescription, function: str
) -> list[Model_pb2.FeatureDescription]:
    for fn in description.functions:
        if fn.name == function:
            return list(fn.input)
    return list(description.input)


def flexible_shape_information(
    description: Model_pb2.ModelDescription, function: str, where: str
) -> MIL_pb2.Value | None:
    """The FlexibleShapeInformation attribute for `function`, or None if no input is flexible."""
    defaults: list[tuple[str, list[int]]] = []
    ranges: list[tuple[str, list[tuple[int, int]]]] = []
    for feature in sorted(_features(description, function), key=lambda f: f.name):
        if feature.type.WhichOneof("Type") != "multiArrayType":
            continue
        array = feature.type.multiArrayType
        flexibility = array.WhichOneof("ShapeFlexibility")
        if flexibility == "enumeratedShapes":
            raise UnsupportedConstructError(
                f"input {feature.name!r} has enumerated shapes; Apple's FlexibleShapeInformation "
                "spelling for them has not been observed",
                where,
            )
        if flexibility != "shapeRange":
            continue
        defaults.append((feature.name, list(array.shape)))
        ranges.append(
            (feature.name, [(r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges])
        )
    if not ranges:
        return None
    value = MIL_pb2.Value()
    outer = value.type.tupleType
    default_t, range_t = outer.types.add(), outer.types.add()
    for t, element in ((default_t, "default"), (range_t, "range")):
        _string_type(t.tupleType.types.add())
        dict_t = t.tupleType.types.add().dictionaryType
        _string_type(dict_t.keyType)
        if element == "default":
            _int_tensor(dict_t.valueType, None)
        else:
            _int_tensor(dict_t.valueType.listType.type, 2)
            dict_t.valueType.listType.length.unknown.variadic = False
    items = value.immediateValue.tuple
    _labelled(items.values.add(), default_t, "DefaultShapes", defaults, _default_value)
    _labelled(items.values.add(), range_t, "RangeDims", ranges, _range_value)
    return value


def _labelled(item: MIL_pb2.Value, vt: MIL_pb2.ValueType, label: str, rows, fill) -> None:
    item.type.CopyFrom(vt)
    _string(item.immediateValue.tuple.values.add(), label)
    table = item.immediateValue.tuple.values.add()
    table.type.CopyFrom(vt.tupleType.types[1])
    table.immediateValue.dictionary.SetInParent()
    value_type = vt.tupleType.types[1].dictionaryType.valueType
    for name, data in rows:
        kv = table.immediateValue.dictionary.values.add()
        _string(kv.key, name)
        kv.value.type.CopyFrom(value_type)
        fill(kv.value, data)


def _default_value(value: MIL_pb2.Value, shape: list[int]) -> None:
    value.immediateValue.tensor.ints.values.extend(shape)


def _range_value(value: MIL_pb2.Value, bounds: list[tuple[int, int]]) -> None:
    element_type = value.type.listType.type
    value.immediateValue.list.SetInParent()
    for lower, upper in bounds:
        pair = value.immediateValue.list.values.add()
        pair.type.CopyFrom(element_type)
        pair.immediateValue.tensor.ints.values.extend([lower, upper])
