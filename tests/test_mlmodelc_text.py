"""The MIL printer and parser on every construct of MIL.proto, in both dialects.

Spellings Apple's goldens show are asserted as text; the others (no golden shows them) are held
to a round trip: protobuf -> text -> protobuf gives the same message, text -> protobuf -> text
the same text.
"""

from __future__ import annotations

import math

import pytest
from coremltools.proto import MIL_pb2

from app.language.dialect import PROGRAM_1_0, PROGRAM_1_3
from app.language.elements import TEXT_NAMES, encode_elements
from app.language.errors import MilSyntaxError
from app.language.hexfloat import format_hex, parse_float
from app.language.parser import parse_program
from app.language.printer import print_program

D = MIL_pb2


def tensor_type(vt: MIL_pb2.ValueType, dtype: int, shape: list[int | None]) -> MIL_pb2.ValueType:
    vt.tensorType.dataType = dtype
    vt.tensorType.rank = len(shape)
    for n in shape:
        dim = vt.tensorType.dimensions.add()
        if n is None:
            dim.unknown.variadic = False
        else:
            dim.constant.size = n
    return vt


def tensor_value(dtype: int, shape: list[int], values: list) -> MIL_pb2.Value:
    v = MIL_pb2.Value()
    tensor_type(v.type, dtype, shape)
    encode_elements(v.immediateValue.tensor, dtype, values)
    return v


def program_with(ops: list[MIL_pb2.Operation], opset: str = "CoreML8") -> MIL_pb2.Program:
    program = MIL_pb2.Program()
    program.version = 1
    fn = program.functions["main"]
    fn.opset = opset
    x = fn.inputs.add()
    x.name = "x"
    tensor_type(x.type, D.FLOAT16, [1, 4])
    block = fn.block_specializations[opset]
    block.operations.extend(ops)
    block.outputs.append(ops[-1].outputs[0].name if ops and ops[-1].outputs else "x")
    return program


def const(name: str, value: MIL_pb2.Value) -> MIL_pb2.Operation:
    op = MIL_pb2.Operation()
    op.type = "const"
    out = op.outputs.add()
    out.name = name
    out.type.CopyFrom(value.type)
    op.attributes["val"].CopyFrom(value)
    return op


def inputs_sorted(program: MIL_pb2.Program) -> MIL_pb2.Program:
    """The program as its text says it: Apple prints function inputs sorted by name."""
    out = MIL_pb2.Program()
    out.CopyFrom(program)
    for fn in out.functions.values():
        ordered = sorted(fn.inputs, key=lambda v: v.name)
        del fn.inputs[:]
        fn.inputs.extend(ordered)
    return out


def round_trips(program: MIL_pb2.Program, dialect) -> str:
    text = print_program(program, dialect)
    parsed = parse_program(text)
    assert parsed.dialect == dialect
    assert parsed.program == inputs_sorted(program)
    assert print_program(parsed.program, dialect) == text
    return text


def body_line(text: str, index: int = 0) -> str:
    return [line for line in text.splitlines() if line.startswith(" " * 12)][index].strip()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0x0p+0"),  # golden
        (-0.0, "-0x0p+0"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),  # golden
        (math.nan, "nan"),
        (2.0**-24, "0x1p-24"),  # golden: smallest fp16 subnormal
        (float.fromhex("0x1.5p-17"), "0x1.5p-17"),  # golden: fp16 subnormal
        (float.fromhex("0x1.ff8p-15"), "0x1.ff8p-15"),  # golden: largest fp16 subnormal
        (10000.0, "0x1.388p+13"),  # golden
        (float.fromhex("-0x1.e28358p-6"), "-0x1.e28358p-6"),  # golden, fp32
        (5e-324, "0x1p-1074"),  # fp64 subnormal: normalised, as Apple's printf does
        (1.0, "0x1p+0"),
    ],
)
def test_float_spelling(value, text):
    assert format_hex(value) == text
    back = parse_float(text)
    if math.isnan(value):
        assert math.isnan(back)
    else:
        assert back == value and math.copysign(1, back) == math.copysign(1, value)


# (dtype, values) for a rank-1 immediate tensor of every MIL data type
ELEMENTS = [
    (D.BOOL, [True, False]),
    (D.STRING, ["plain", 'q"uo\\te']),
    (D.FLOAT8E4M3FN, [1.5, -0.25, 448.0]),
    (D.FLOAT8E5M2, [1.5, -0.25, math.inf]),
    (D.FLOAT16, [0.0, -0.0, 2.0**-24, 65504.0, -math.inf]),
    (D.FLOAT32, [0.1, -3.5, 2.0**-149]),
    (D.FLOAT64, [0.1, 5e-324, -1e300]),
    (D.BFLOAT16, [1.0, -2.5, 3.0e38]),
    (D.INT8, [-128, 0, 127]),
    (D.INT16, [-32768, 32767]),
    (D.INT32, [-(2**31), 2**31 - 1]),
    (D.INT64, [-(2**63), 2**63 - 1]),
    (D.INT4, [-8, -1, 0, 7]),
    (D.UINT8, [0, 255]),
    (D.UINT16, [0, 65535]),
    (D.UINT32, [0, 2**32 - 1]),
    (D.UINT64, [0, 2**64 - 1]),
    (D.UINT4, [0, 15, 9]),
    (D.UINT2, [0, 3, 2, 1, 3]),
    (D.UINT1, [1, 0, 1, 1, 0, 0, 1, 0, 1]),
    (D.UINT6, [0, 63, 17]),
    (D.UINT3, [7, 0, 5]),
]


@pytest.mark.parametrize("dialect", [PROGRAM_1_0, PROGRAM_1_3], ids=["1.0", "1.3"])
@pytest.mark.parametrize(("dtype", "values"), ELEMENTS, ids=[TEXT_NAMES[d] for d, _ in ELEMENTS])
def test_every_dtype_tensor_and_scalar(dtype, values, dialect):
    name = TEXT_NAMES[dtype]
    ops = [
        const("t", tensor_value(dtype, [len(values)], values)),
        const("s", tensor_value(dtype, [], values[:1])),
    ]
    text = round_trips(program_with(ops), dialect)
    scalar_type = name if dialect.bare_scalars else f"tensor<{name}, []>"
    assert body_line(text, 0).startswith(f"tensor<{name}, [{len(values)}]> t = const()[")
    assert body_line(text, 1).startswith(f"{scalar_type} s = const()[")
    assert f"val = {scalar_type}(" in body_line(text, 1)


def test_sub_byte_values_are_printed_unpacked():
    op = const("w", tensor_value(D.UINT4, [2, 3], [1, 2, 3, 4, 5, 15]))
    text = round_trips(program_with([op]), PROGRAM_1_3)
    assert "val = tensor<uint4, [2, 3]>([[1, 2, 3], [4, 5, 15]])" in text


def test_strings_and_bools_in_both_dialects():
    ops = [
        const("s", tensor_value(D.STRING, [], ["fp16"])),
        const("b", tensor_value(D.BOOL, [3], [True, False, True])),
    ]
    old = round_trips(program_with(ops), PROGRAM_1_0)
    new = round_trips(program_with(ops), PROGRAM_1_3)
    # golden spellings (silero-vad, 3600 goldens)
    assert 'val = tensor<string, []>("fp16")' in old and 'val = string("fp16")' in new
    assert "val = tensor<bool, [3]>([true, false, true])" in old


def test_blobfile_in_both_dialects():
    v = MIL_pb2.Value()
    tensor_type(v.type, D.FLOAT16, [258, 1, 256])
    v.blobFileValue.fileName = "@model_path/weights/weight.bin"
    v.blobFileValue.offset = 64
    old = round_trips(program_with([const("w", v)]), PROGRAM_1_0)
    new = round_trips(program_with([const("w", v)]), PROGRAM_1_3)
    assert (
        'tensor<fp16, [258, 1, 256]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), '
        "offset = tensor<uint64, []>(64)))" in old
    )
    assert 'BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64))' in new


def compound_value() -> MIL_pb2.Value:
    """(("names", {{"a", [1, 2]}, {"b", [3]}}), [true, false]) with its full type."""
    v = MIL_pb2.Value()
    outer = v.type.tupleType
    first = outer.types.add().tupleType
    first.types.add().tensorType.dataType = D.STRING
    table = first.types.add().dictionaryType
    table.keyType.tensorType.dataType = D.STRING
    tensor_type(table.valueType, D.INT32, [None])
    flags = outer.types.add().listType
    flags.type.tensorType.dataType = D.BOOL
    flags.length.constant.size = 2
    head = v.immediateValue.tuple.values.add()
    head.type.CopyFrom(outer.types[0])
    label = head.immediateValue.tuple.values.add()
    label.type.CopyFrom(first.types[0])
    label.immediateValue.tensor.strings.values.append("names")
    entries = head.immediateValue.tuple.values.add()
    entries.type.CopyFrom(first.types[1])
    entries.immediateValue.dictionary.SetInParent()
    for key, ints in (("b", [3]), ("a", [1, 2])):  # stored unsorted: printed sorted by key
        kv = entries.immediateValue.dictionary.values.add()
        kv.key.type.CopyFrom(table.keyType)
        kv.key.immediateValue.tensor.strings.values.append(key)
        kv.value.type.CopyFrom(table.valueType)
        kv.value.immediateValue.tensor.ints.values.extend(ints)
    tail = v.immediateValue.tuple.values.add()
    tail.type.CopyFrom(outer.types[1])
    tail.immediateValue.list.SetInParent()
    for flag in (True, False):
        item = tail.immediateValue.list.values.add()
        item.type.CopyFrom(flags.type)
        item.immediateValue.tensor.bools.values.append(flag)
    return v


def test_tuples_dicts_and_lists():
    op = MIL_pb2.Operation()
    op.type = "relu"
    op.inputs["x"].arguments.add().name = "x"
    out = op.outputs.add()
    out.name = "y"
    tensor_type(out.type, D.FLOAT16, [1, 4])
    op.attributes["info"].CopyFrom(compound_value())
    program = program_with([op])
    text = print_program(program, PROGRAM_1_3)
    assert (
        "[info = tuple<tuple<string, dict<string, tensor<int32, [?]>>>, list<bool, 2>>"
        '((("names", {{"a", [1, 2]}, {"b", [3]}}), [true, false]))]' in text
    )
    parsed = parse_program(text).program
    assert print_program(parsed, PROGRAM_1_3) == text
    old = print_program(program, PROGRAM_1_0)
    assert "tuple<tuple<tensor<string, []>, dict<tensor<string, []>, tensor<int32, [?]>>>" in old
    assert print_program(parse_program(old).program, PROGRAM_1_0) == old


def test_arguments_sorted_tuple_bindings_inline_values_and_no_attributes():
    op = MIL_pb2.Operation()
    op.type = "concat"
    op.inputs["values"].arguments.add().name = "x"
    op.inputs["values"].arguments.add().name = "x"
    op.inputs["axis"].arguments.add().value.CopyFrom(tensor_value(D.INT32, [], [1]))
    op.inputs["interleave"].arguments.add().value.CopyFrom(tensor_value(D.BOOL, [], [False]))
    out = op.outputs.add()
    out.name = "y"
    tensor_type(out.type, D.FLOAT16, [1, 8])
    text = round_trips(program_with([op]), PROGRAM_1_3)
    assert body_line(text) == (
        "tensor<fp16, [1, 8]> y = concat(axis = int32(1), interleave = bool(false), values = (x, x));"
    )


def test_op_without_outputs_and_states():
    program = program_with([])
    fn = program.functions["main"]
    kv = fn.inputs.add()
    kv.name = "kv"
    tensor_type(kv.type.stateType.wrappedType, D.FLOAT16, [1, 4])
    write = MIL_pb2.Operation()
    write.type = "write_state"
    write.inputs["input"].arguments.add().name = "kv"
    write.inputs["data"].arguments.add().name = "x"
    write.attributes["name"].CopyFrom(tensor_value(D.STRING, [], ["w"]))
    fn.block_specializations["CoreML8"].operations.append(write)
    text = round_trips(program, PROGRAM_1_3)
    assert "func main<ios18>(state<tensor<fp16, [1, 4]>> kv, tensor<fp16, [1, 4]> x) {" in text
    assert body_line(text) == 'write_state(data = x, input = kv)[name = string("w")];'


def test_functions_sorted_inputs_sorted_outputs_kept():
    program = MIL_pb2.Program()
    program.version = 1
    for name in ("second", "first"):
        fn = program.functions[name]
        fn.opset = "CoreML7"
        for arg in ("b", "a"):
            v = fn.inputs.add()
            v.name = arg
            tensor_type(v.type, D.FLOAT32, [None, 2])
        fn.block_specializations["CoreML7"].outputs.extend(["b", "a"])
    text = round_trips(program, PROGRAM_1_0)
    assert text == (
        "program(1.0)\n{\n"
        "    func first<ios17>(tensor<fp32, [?, 2]> a, tensor<fp32, [?, 2]> b) {\n"
        "        } -> (b, a);\n"
        "    func second<ios17>(tensor<fp32, [?, 2]> a, tensor<fp32, [?, 2]> b) {\n"
        "        } -> (b, a);\n"
        "}"
    )


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("program(2.0)\n{\n}", 1, 9, "program version"),
        ("program(1.0)\n{\n    func main<ios99>() {\n    } -> ();\n}", 3, 15, "unknown opset"),
        (
            "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2]> x) {\n"
            "            tensor<fp16, [2]> y = relu(x = x)\n        } -> (y);\n}",
            5,
            9,
            "expected ';'",
        ),
        (
            "program(1.3)\n{\n    func main<ios18>() {\n"
            "            tensor<int32, [3]> c = const()[val = tensor<int32, [3]>([1, 2])];\n"
            "        } -> (c);\n}",
            4,
            69,
            "expected 3 items",
        ),
        ("program(1.3)\n{\n    func main<ios18>(tensor<fp99, [2]> x) {", 3, 29, "data type"),
        ("program(1.3)\n{\n  $\n}", 3, 3, "unexpected character"),
    ],
)
def test_syntax_errors_name_line_and_column(text, line, column, words):
    with pytest.raises(MilSyntaxError) as info:
        parse_program(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert words in str(info.value)
    assert f"model.mil:{line}:{column}" in str(info.value)
