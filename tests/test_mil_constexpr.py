"""The constexpr ops in the IR: Apple's compiled programs (the silero-vad goldens) read back and
re-emitted statement for statement, decompressed as coremltools decompresses them, the type checks
of coremltools' op definitions, and both spellings round-tripped through text and protobuf."""

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from quantize_support import coremltools_decompress, write_weights

from app.mil import Builder, DType, MILBuildError, emit_text, parse_text
from app.mil.from_proto import load_model
from app.mil.to_proto import emit_proto
from app.packaging import plan_weights
from app.reference import Executor

GOLDENS = Path(__file__).resolve().parents[2] / "shared" / "goldens" / "silero-vad"
if not GOLDENS.exists():  # the worktree layout: /work/wt/<name>, shared/ beside the checkouts
    GOLDENS = Path("/work/shared/goldens/silero-vad")
QUANTIZED = ["unified_int8", "unified_palette_4bit", "unified_pruned_int8"]
INFO = {"coremltools-version": "9.0"}
_STATEMENT = re.compile(r"^\s*(tensor<[^>]*> (\w+) = constexpr_\w+\(\)\[.*\];)$", re.M)


def golden_constexprs(name: str) -> tuple[list[tuple[str, str]], bytes]:
    """(output name, statement) of every constexpr op Apple's compiler wrote, and weight.bin."""
    bundle = GOLDENS / name / f"{name}.mlmodelc"
    found = [
        (m.group(2), m.group(1)) for m in _STATEMENT.finditer((bundle / "model.mil").read_text())
    ]
    return found, (bundle / "weights" / "weight.bin").read_bytes()


def as_program_text(statements: list[tuple[str, str]]) -> str:
    """The statements as the body of an ios17 function (ios16's spelling is ios17's)."""
    body = "\n".join(f"        {s}" for _, s in statements)
    outputs = ", ".join(n for n, _ in statements)
    return f"program(1.0)\n{{\n    func main<ios17>() {{\n{body}\n    }} -> ({outputs});\n}}\n"


def coremltools_values(name: str) -> dict[str, np.ndarray]:
    """Each constexpr op's output as coremltools computes it from the source .mlpackage."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load

    pkg = GOLDENS / name / "source.mlpackage"
    spec = ct.utils.load_spec(str(pkg))
    weights = pkg / "Data" / "com.apple.CoreML" / "weights"
    prog = load(spec, spec.specificationVersion, file_weights_dir=str(weights))
    return {
        op.outputs[0].name: op.materialized_val_inference()
        for op in prog.functions["main"].operations
        if op.op_type.startswith("constexpr_")
    }


@pytest.mark.parametrize("name", QUANTIZED)
def test_apple_constexpr_statements_read_back_and_re_emit_identically(name):
    statements, blob = golden_constexprs(name)
    assert statements, "the golden has constexpr ops"
    parsed = parse_text(as_program_text(statements), blob)
    text = emit_text(parsed.program, parsed.offsets, {})
    ours = [line.strip() for line in text.splitlines() if "constexpr_" in line]
    assert ours == [s for _, s in statements]


@pytest.mark.parametrize("name", QUANTIZED)
def test_apple_constexpr_weights_decompress_as_coremltools_does(name):
    statements, blob = golden_constexprs(name)
    parsed = parse_text(as_program_text(statements), blob)
    ours = Executor(parsed.program, weights=blob, offsets=parsed.offsets).run({}).outputs
    theirs = coremltools_values(name)
    assert set(ours) <= set(theirs)
    for out, value in ours.items():
        np.testing.assert_array_equal(value, theirs[out].astype(value.dtype), err_msg=out)
        assert value.dtype == theirs[out].dtype


# -- type checks, as coremltools' op definitions make them --------------------------------------


def ios18_args(b: Builder, **arrays):
    return {k: b.const(k, a, d) for k, (a, d) in arrays.items()}


U8, F16 = np.uint8, np.float16
BAD_IOS18 = [
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros((4, 4), U8), DType.UINT2),
            "lut": (np.zeros((1, 1, 8, 1), F16), DType.FP16),
        },
        "lut",
        "uint2 indices need 4 entries",
    ),
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros((4, 4), U8), DType.UINT1),
            "lut": (np.zeros((3, 1, 2, 1), F16), DType.FP16),
        },
        "lut",
        "3 tables do not divide dimension 0",
    ),
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros((4, 4), U8), DType.UINT1),
            "lut": (np.zeros((1, 2, 1), F16), DType.FP16),
        },
        "lut",
        "must be the indices' rank + 2",
    ),
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros((4, 4), U8), DType.UINT1),
            "lut": (np.zeros((1, 1, 2, 2), F16), DType.FP16),
        },
        "vector_axis",
        "required for vectors of 2",
    ),
    (
        "constexpr_blockwise_shift_scale",
        {
            "data": (np.zeros((4, 6), np.int8), DType.INT4),
            "scale": (np.ones((4, 4), F16), DType.FP16),
        },
        "scale",
        "4 scales do not divide dimension 1",
    ),
    (
        "constexpr_blockwise_shift_scale",
        {
            "data": (np.zeros((4, 6), np.int8), DType.INT4),
            "scale": (np.ones((4,), F16), DType.FP16),
        },
        "scale",
        "rank 1 differs",
    ),
    (
        "constexpr_blockwise_shift_scale",
        {
            "data": (np.zeros((4, 6), np.int8), DType.INT4),
            "scale": (np.ones((4, 2), F16), DType.FP16),
            "offset": (np.zeros((4, 2), np.int8), DType.INT8),
        },
        "offset",
        "an integer offset must be int4",
    ),
    (
        "constexpr_blockwise_shift_scale",
        {
            "data": (np.zeros((4, 6), np.int8), DType.INT4),
            "scale": (np.ones((4, 2), F16), DType.FP16),
            "offset": (np.zeros((4, 1), np.int8), DType.INT4),
        },
        "offset",
        "differs from the scale's",
    ),
    (
        "constexpr_blockwise_shift_scale",
        {
            "data": (np.zeros((4, 6), np.int32), DType.INT32),
            "scale": (np.ones((4, 2), F16), DType.FP16),
        },
        "data",
        "dtype int32 is not allowed",
    ),
    (
        "constexpr_sparse_to_dense",
        {"nonzero_data": (np.ones(3, F16), DType.FP16), "mask": (np.eye(4, dtype=U8), DType.UINT1)},
        "nonzero_data",
        "3 values for 4 set mask bits",
    ),
    (
        "constexpr_sparse_to_dense",
        {"nonzero_data": (np.ones(4, F16), DType.FP16), "mask": (np.eye(4, dtype=U8), DType.UINT8)},
        "mask",
        "dtype uint8 is not allowed",
    ),
]


@pytest.mark.parametrize(("op_type", "arrays", "arg", "message"), BAD_IOS18)
def test_ios18_declarations_refuse_what_coremltools_refuses(op_type, arrays, arg, message):
    b = Builder("ios18")
    args = ios18_args(b, **arrays)
    with pytest.raises(MILBuildError, match=re.escape(message)) as info:
        b.op(op_type, "w", **args)
    assert info.value.arg == arg


BAD_IOS17 = [
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros(6, U8), DType.UINT8),
            "lut": (np.zeros(8, F16), DType.FP16),
            "shape": (np.array([4, 4], np.uint32), DType.UINT32),
        },
        "lut",
        "needs one of [2, 4, 16, 64, 256] entries, got 8",
    ),
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros(6, U8), DType.UINT8),
            "lut": (np.zeros(4, F16), DType.FP16),
            "shape": (np.array([4, 4], np.uint32), DType.UINT32),
        },
        "indices",
        "[4, 4] packed needs 4 bytes, got 6",
    ),
    (
        "constexpr_lut_to_dense",
        {
            "indices": (np.zeros((4, 4), U8), DType.UINT2),
            "lut": (np.zeros(4, F16), DType.FP16),
            "shape": (np.array([4, 4], np.uint32), DType.UINT32),
        },
        "indices",
        "dtype uint2 is not allowed",
    ),
    (
        "constexpr_sparse_to_dense",
        {
            "nonzero_data": (np.ones(2, F16), DType.FP16),
            "mask": (np.array([0b11, 0b10000], U8), DType.UINT8),
            "shape": (np.array([3, 4], np.uint32), DType.UINT32),
        },
        "mask",
        "padding bits after the last element",
    ),
    (
        "constexpr_sparse_to_dense",
        {
            "nonzero_data": (np.ones(2, F16), DType.FP16),
            "mask": (np.array([0b111, 0], U8), DType.UINT8),
            "shape": (np.array([3, 4], np.uint32), DType.UINT32),
        },
        "nonzero_data",
        "2 values for 3 set mask bits",
    ),
    (
        "constexpr_affine_dequantize",
        {
            "quantized_data": (np.zeros((4, 3), np.int8), DType.INT8),
            "zero_point": (np.zeros(4, np.int8), DType.INT8),
            "scale": (np.ones(3, F16), DType.FP16),
            "axis": (np.int32(0), DType.INT32),
        },
        "scale",
        "a vector of 4 (axis 0)",
    ),
    (
        "constexpr_affine_dequantize",
        {
            "quantized_data": (np.zeros((4, 3), np.int8), DType.INT8),
            "zero_point": (np.zeros(4, np.int8), DType.INT8),
            "scale": (np.ones(4, F16), DType.FP16),
            "axis": (np.int32(2), DType.INT32),
        },
        "axis",
        "axis 2 is out of range",
    ),
    (
        "constexpr_blockwise_shift_scale",
        {
            "data": (np.zeros((4, 6), np.int8), DType.INT8),
            "scale": (np.ones((4, 1), F16), DType.FP16),
        },
        None,
        "not in the ios17 opset (available from ios18)",
    ),
]


@pytest.mark.parametrize(("op_type", "arrays", "arg", "message"), BAD_IOS17)
def test_ios17_declarations_refuse_what_coremltools_refuses(op_type, arrays, arg, message):
    b = Builder("ios17")
    args = ios18_args(b, **arrays)
    with pytest.raises(MILBuildError, match=re.escape(message)) as info:
        b.op(op_type, "w", **args)
    assert info.value.arg == arg


def test_ios16_form_arguments_must_be_consts():
    b = Builder("ios17")
    x = b.input("x", DType.UINT8, (4,))
    lut = b.const("lut", np.zeros(2, F16))
    with pytest.raises(MILBuildError, match="must be a const"):
        b.op(
            "constexpr_lut_to_dense",
            "w",
            indices=x,
            lut=lut,
            shape=b.const("s", np.array([32], np.uint32), DType.UINT32),
        )


# -- the reference decompression against coremltools', beyond what the quantizer emits ----------

RNG = np.random.default_rng(11)

DIRECT = [
    (
        "vector LUT on axis 1",
        "constexpr_lut_to_dense",
        {
            "indices": (RNG.integers(0, 4, (6, 5, 3)).astype(U8), DType.UINT2),
            "lut": (RNG.standard_normal((2, 1, 3, 4, 2)).astype(F16), DType.FP16),
            "vector_axis": (np.int32(1), DType.INT32),
        },
    ),
    (
        "LUTs on two axes",
        "constexpr_lut_to_dense",
        {
            "indices": (RNG.integers(0, 8, (6, 10)).astype(U8), DType.UINT3),
            "lut": (RNG.standard_normal((3, 5, 8, 1)).astype(F16), DType.FP16),
        },
    ),
    (
        "int8 LUT values",
        "constexpr_lut_to_dense",
        {
            "indices": (RNG.integers(0, 64, (7, 9)).astype(U8), DType.UINT6),
            "lut": (RNG.integers(-128, 128, (1, 1, 64, 1)).astype(np.int8), DType.INT8),
        },
    ),
    (
        "blocks on three axes, float offset",
        "constexpr_blockwise_shift_scale",
        {
            "data": (RNG.integers(-8, 8, (4, 6, 9)).astype(np.int8), DType.INT4),
            "scale": (RNG.random((2, 3, 3)).astype(F16), DType.FP16),
            "offset": (RNG.standard_normal((2, 3, 3)).astype(F16), DType.FP16),
        },
    ),
    (
        "fp32 scales, uint8 offset",
        "constexpr_blockwise_shift_scale",
        {
            "data": (RNG.integers(0, 256, (5, 8)).astype(U8), DType.UINT8),
            "scale": (RNG.random((5, 2)).astype(np.float32), DType.FP32),
            "offset": (RNG.integers(0, 256, (5, 2)).astype(U8), DType.UINT8),
        },
    ),
    (
        "int4 sparse",
        "constexpr_sparse_to_dense",
        {
            "nonzero_data": (RNG.integers(-8, 8, 13).astype(np.int8), DType.INT4),
            "mask": (
                np.isin(np.arange(35), RNG.choice(35, 13, replace=False)).reshape(5, 7).astype(U8),
                DType.UINT1,
            ),
        },
    ),
]


@pytest.mark.parametrize(("what", "op_type", "arrays"), DIRECT, ids=[d[0] for d in DIRECT])
def test_reference_decompression_equals_coremltools(what, op_type, arrays):
    b = Builder("ios18")
    w = b.op(op_type, "w", **ios18_args(b, **arrays))
    program = b.build([w])
    ours = Executor.from_written_weights(program).run({}).outputs["w"]
    values = {k: np.asarray(a) for k, (a, _) in arrays.items()}
    theirs = coremltools_decompress(op_type, values)
    np.testing.assert_array_equal(ours, np.asarray(theirs).astype(ours.dtype))


@pytest.mark.parametrize("bits", [1, 2, 4, 6, 8])
@pytest.mark.parametrize("shape", [(3, 5), (7, 3, 1)])
def test_ios16_lut_decompression_equals_coremltools_at_odd_sizes(bits, shape):
    from coremltools.optimize import _utils as ct_utils

    n = int(np.prod(shape))
    indices = RNG.integers(0, 1 << bits, n).astype(U8)
    packed = ct_utils.pack_elements_into_bits(indices, bits)
    arrays = {
        "indices": (packed, DType.UINT8),
        "lut": (RNG.standard_normal(1 << bits).astype(F16), DType.FP16),
        "shape": (np.array(shape, np.uint32), DType.UINT32),
    }
    b = Builder("ios17")
    program = b.build([b.op("constexpr_lut_to_dense", "w", **ios18_args(b, **arrays))])
    ours = Executor.from_written_weights(program).run({}).outputs["w"]
    theirs = coremltools_decompress(
        "constexpr_lut_to_dense", {k: a for k, (a, _) in arrays.items()}
    )
    np.testing.assert_array_equal(ours, theirs)


# -- both spellings through text and protobuf ---------------------------------------------------


@pytest.mark.parametrize("target", ["ios18", "ios17"])
def test_text_and_protobuf_round_trips_are_identical(target):
    b = Builder(target)
    if target == "ios18":  # outputs must be model output types: not the int4 one
        ops = [d for d in DIRECT if d[0] != "int4 sparse"]
    else:
        ops = [
            (
                "affine",
                "constexpr_affine_dequantize",
                {
                    "quantized_data": (RNG.integers(0, 256, (6, 4)).astype(U8), DType.UINT8),
                    "zero_point": (RNG.integers(0, 256, 6).astype(U8), DType.UINT8),
                    "scale": (RNG.random(6).astype(F16), DType.FP16),
                    "axis": (np.int32(0), DType.INT32),
                },
            )
        ]
    outs = []
    for i, (_, op_type, arrays) in enumerate(ops):
        args = {k: b.const(b.unique(f"w{i}_{k}"), a, d) for k, (a, d) in sorted(arrays.items())}
        outs.append(b.op(op_type, f"w{i}", **args))
    program = b.build(outs)
    blob, offsets = write_weights(program)
    text = emit_text(program, offsets, INFO)
    assert " = const()" not in text  # every const is written inside its constexpr op

    parsed = parse_text(text, blob)
    assert emit_text(parsed.program, plan_weights(parsed.program)[1], INFO) == text
    loaded = load_model(emit_proto(program, offsets, INFO).SerializeToString(), blob)
    assert emit_text(loaded, plan_weights(loaded)[1], INFO) == text
    want = Executor.from_written_weights(program).run({}).outputs
    for again in (parsed.program, loaded):
        got = Executor.from_written_weights(again).run({}).outputs
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_a_const_used_elsewhere_is_also_kept_as_its_own_statement():
    b = Builder("ios18")
    scale = b.const("scale", np.ones((4, 1), F16))
    data = b.const("data", np.zeros((4, 8), np.int8), DType.INT8)
    w = b.op("constexpr_blockwise_shift_scale", "w", data=data, scale=scale)
    y = b.op("mul", "y", x=w, y=scale)
    text = emit_text(b.build([y]), write_weights(b.build([y]))[1], INFO)
    assert "tensor<fp16, [4, 1]> scale = const()" in text
    assert "tensor<int8, [4, 8]> data = const()" not in text


def test_inline_values_are_refused_for_ordinary_ops():
    from app.mil import MILParseError

    text = (
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2]> x) {\n"
        '        tensor<fp16, [2]> y = add(x = x, y = fp16(0x1p+0))[name = string("y")];\n'
        "    } -> (y);\n}\n"
    )
    with pytest.raises(MILParseError, match="add takes variables, not values"):
        parse_text(text)
