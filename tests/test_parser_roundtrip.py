"""model.mil text and .mlpackage protobuf back into the IR: text → IR → text is identical, the
parsed program computes what the original computes, and bad text fails naming the line."""

import io
import re
import zipfile

import numpy as np
import pytest
from kernel_cases import SMALL, VARIANTS

from app.catalog_build import build_kernel
from app.errors import RequestError
from app.mil import Builder, DType, MILParseError, emit_text, parse_text
from app.mil.from_proto import load_model
from app.mil.to_proto import emit_proto
from app.packaging import plan_weights, write_kernel_zip
from app.reference import Executor
from app.reference.executor import random_inputs
from app.reference.load import ArtifactError, open_artifact

INFO = {"coremltools-version": "9.0", "ane-kernels-version": "0.1.0"}


def _cases():
    for target in ("ios18", "ios17"):
        for op, params in [*SMALL.items(), *VARIANTS]:
            try:
                build_kernel(op, params, random_seed=0, target=target)
            except RequestError:  # sdpa without causal and the state ops need ios18
                continue
            yield pytest.param(target, op, params, id=f"{target}-{op}-{len(params)}")


CASES = list(_cases())


def written(program):
    writer, offsets = plan_weights(program)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue(), offsets


def same_outputs(a, b, seed=5):
    inputs = random_inputs(a.main, seed)
    out_a = Executor.from_written_weights(a).run(inputs).outputs
    out_b = Executor.from_written_weights(b).run(inputs).outputs
    assert out_a.keys() == out_b.keys()
    for name in out_a:
        assert out_a[name].dtype == out_b[name].dtype
        np.testing.assert_array_equal(out_a[name], out_b[name])


@pytest.mark.parametrize(("target", "op", "params"), CASES)
def test_text_round_trip_is_identical_and_computes_the_same(target, op, params):
    program = build_kernel(op, params, random_seed=0, target=target).program
    blob, offsets = written(program)
    text = emit_text(program, offsets, INFO)
    parsed = parse_text(text, blob)
    assert parsed.build_info == INFO
    assert parsed.offsets == offsets
    assert emit_text(parsed.program, plan_weights(parsed.program)[1], parsed.build_info) == text
    same_outputs(program, parsed.program)


@pytest.mark.parametrize(("target", "op", "params"), CASES)
def test_protobuf_round_trip_is_identical_and_computes_the_same(target, op, params):
    program = build_kernel(op, params, random_seed=0, target=target).program
    blob, offsets = written(program)
    loaded = load_model(emit_proto(program, offsets, INFO).SerializeToString(), blob)
    assert emit_text(loaded, plan_weights(loaded)[1], INFO) == emit_text(program, offsets, INFO)
    same_outputs(program, loaded)


@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_kernel_zips_and_their_directories_open_as_programs(tmp_path, fmt):
    build = build_kernel(
        "conv", {"in_channels": 8, "out_channels": 4, "spatial": 3, "bias": True}, random_seed=2
    )
    path = tmp_path / "k.zip"
    with open(path, "wb") as f:
        write_kernel_zip(build, f, fmt)
    artifact = open_artifact(path)
    assert artifact.kind == fmt
    same_outputs(build.program, artifact.program)
    unzipped = tmp_path / "unzipped"
    zipfile.ZipFile(path).extractall(unzipped)
    same_outputs(build.program, open_artifact(unzipped).program)
    if fmt == "mlpackage":
        same_outputs(build.program, open_artifact(unzipped / "conv.mlpackage").program)


HAND_WRITTEN_IOS17 = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3402.4.1"}, {"k", "v"}})]
{
    func main<ios17>(tensor<fp16, [1, 4]> x, tensor<fp16, [1, 4]> w) {
            tensor<fp16, []> half = const()[name = tensor<string, []>("half"), val = tensor<fp16, []>(0.5)];
        tensor<fp16, [1, 4]>   prod=mul(y = w,x = x)  [name = tensor<string, []>("prod")];
        tensor<int32, [1]> axes = const()[name = tensor<string, []>("axes"), val = tensor<int32, [1]>([-1])];
        tensor<bool, []> kd = const()[name = tensor<string, []>("kd"), val = tensor<bool, []>(true)];
        tensor<fp16, [1, 1]> s = reduce_sum(x = prod, axes = axes, keep_dims = kd)[name = tensor<string, []>("s")];

        tensor<fp16, [1, 1]> y = mul(x = s, y = half)[name = tensor<string, []>("y")];
        } -> (y);
}
"""


def test_hand_written_ios17_text_with_compiler_quirks():
    """Uneven indentation, blank lines, unsorted arguments, decimal floats, the ios17 spellings."""
    parsed = parse_text(HAND_WRITTEN_IOS17)
    assert parsed.program.target.name == "ios17"
    assert parsed.build_info == {"coremlc-version": "3402.4.1", "k": "v"}
    x = np.array([[1, 2, 3, 4]], np.float16)
    w = np.array([[4, 3, 2, 1]], np.float16)
    y = Executor(parsed.program).run({"x": x, "w": w}).outputs["y"]
    assert y.tolist() == [[10.0]]  # (4 + 6 + 6 + 4) / 2
    # re-emitted in the canonical spelling, which parses to the same program
    canonical = emit_text(parsed.program, {}, parsed.build_info)
    assert "mul(x = x, y = w)" in canonical and "tensor<fp16, []>(0x1p-1)" in canonical
    assert emit_text(parse_text(canonical).program, {}, parsed.build_info) == canonical


def tiny_program_text(target="ios18"):
    b = Builder(target)
    x = b.input("x", DType.FP16, (1, 16))
    a = b.const("a", np.linspace(1, 2, 16, dtype=np.float32).reshape(1, 16), DType.FP16)
    c = b.const("c", np.linspace(-5, 5, 16, dtype=np.float32).reshape(1, 16), DType.FP16)
    program = b.build([b.op("add", "y", x=b.op("mul", "ax", x=x, y=a), y=c)])
    blob, offsets = written(program)
    return emit_text(program, offsets, INFO), blob, offsets, program


def test_a_wrong_offset_that_fits_another_tensor_gives_a_wrong_answer():
    text, blob, offsets, program = tiny_program_text()
    swapped = (
        text.replace(f"uint64({offsets['a']})", "uint64(OFF_A)")
        .replace(f"uint64({offsets['c']})", f"uint64({offsets['a']})")
        .replace("uint64(OFF_A)", f"uint64({offsets['c']})")
    )
    assert swapped != text
    x = {"x": np.full((1, 16), 2, np.float16)}
    right = Executor(parse_text(text, blob).program).run(x).outputs["y"]
    wrong = Executor(parse_text(swapped, blob).program).run(x).outputs["y"]
    assert not np.allclose(right.astype(float), wrong.astype(float), atol=0.1)
    np.testing.assert_array_equal(right, Executor.from_written_weights(program).run(x).outputs["y"])


def edit(old, new, count=1):
    def apply(text):
        assert text.count(old) >= count, old
        return text.replace(old, new, count)

    return apply


BAD = [
    (
        "missing semicolon",
        edit(')[name = string("ax")];', ')[name = string("ax")]'),
        "line 8: expected ';' after operation 'mul' (line 7), found 'tensor'",
    ),
    (
        "declared shape",
        edit("tensor<fp16, [1, 16]> ax", "tensor<fp16, [1, 8]> ax"),
        "line 7: 'ax' is declared tensor<fp16, [1, 8]> but mul gives tensor<fp16, [1, 16]>",
    ),
    ("unknown op", edit("= add(", "= addd("), "line 8: unknown op type 'addd'"),
    (
        "undefined var",
        edit("add(x = ax", "add(x = bx"),
        "line 8: 'bx' is not defined before its use",
    ),
    ("version", edit("program(1.3)", "program(1.0)"), "line 1: program(1.0) does not match ios18"),
    ("target", edit("main<ios18>", "main<ios16>"), "line 4: unsupported target 'ios16'"),
    (
        "blob path",
        edit("@model_path/weights/weight.bin", "@model_path/weights/other.bin"),
        "line 5: BLOBFILE path",
    ),
    (
        "blob dtype",
        edit("tensor<fp16, [1, 16]>(BLOBFILE", "tensor<fp32, [1, 16]>(BLOBFILE"),
        "line 5: const 'a' is declared tensor<fp16, [1, 16]>, value is tensor<fp32, [1, 16]>",
    ),
    (
        "duplicate name",
        edit(
            'ax = mul(x = x, y = a)[name = string("ax")]',
            'a = mul(x = x, y = a)[name = string("a")]',
        ),
        "line 7: op 'mul': name 'a' is already used",
    ),
    (
        "output name taken",
        edit('[name = string("ax")]', '[name = string("a")]'),
        "line 7: op 'mul': name 'a' is already used",
    ),
    ("garbage", edit("{\n    func", "{\n    $func"), "line 4: unexpected character '$'"),
    (
        "trailing",
        lambda t: t + "}\n",
        "line 10: expected the end of the text after the program, found '}'",
    ),
]


def test_an_op_may_name_its_output_apart_from_itself():
    # Graph programs name ops after their nodes and outputs after what the caller asked for.
    text, blob, _, _ = tiny_program_text()
    renamed = text.replace('[name = string("ax")]', '[name = string("scale_node")]')
    parsed = parse_text(renamed, blob)
    (mul,) = [op for op in parsed.program.main.operations if op.type == "mul"]
    assert (mul.name, mul.output.name) == ("scale_node", "ax")
    assert emit_text(parsed.program, parsed.offsets, parsed.build_info) == renamed


@pytest.mark.parametrize(("edit_text", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_text_fails_naming_the_line(edit_text, message):
    text, blob, _, _ = tiny_program_text()
    with pytest.raises(MILParseError) as err:
        parse_text(edit_text(text), blob)
    assert str(err.value).startswith(message), str(err.value)


def test_blob_problems_name_the_const():
    text, blob, offsets, _ = tiny_program_text()
    with pytest.raises(
        MILParseError, match=re.escape("line 5: const 'a' is in weight.bin, but none was given")
    ):
        parse_text(text)
    not_an_entry = text.replace(f"uint64({offsets['c']})", f"uint64({offsets['a'] + 64})")
    with pytest.raises(MILParseError, match="line 6: const 'c': Invalid sentinel"):
        parse_text(not_an_entry, blob)
    # the same bytes read as fp32: the entry's stored dtype is checked
    fp32_text = text.replace("tensor<fp16, [1, 16]> a", "tensor<fp32, [1, 8]> a").replace(
        'tensor<fp16, [1, 16]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))',
        'tensor<fp32, [1, 8]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))',
    )
    with pytest.raises(MILParseError, match="does not match requested type"):
        parse_text(fp32_text, blob)
    with pytest.raises(MILParseError, match=re.escape("weight.bin: truncated file")):
        parse_text(text, b"\0" * 10)


def test_ops_outside_the_targets_opset_are_refused():
    text = emit_text(build_kernel("sdpa", SMALL["sdpa"]).program, {}, INFO)
    ios17 = text.replace("program(1.3)", "program(1.0)").replace("main<ios18>", "main<ios17>")
    with pytest.raises(MILParseError, match="not in the ios17 opset"):
        parse_text(ios17)


def test_broken_artifacts_are_reported(tmp_path):
    build = build_kernel("rmsnorm", SMALL["rmsnorm"], random_seed=0)
    good = tmp_path / "good.zip"
    with open(good, "wb") as f:
        write_kernel_zip(build, f, "mil")
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "model.mil":
                data = data.replace(b"offset = uint64(64)", b"offset = uint64(96)")
            dst.writestr(item, data)
    with pytest.raises(ArtifactError, match="const 'weight'"):
        open_artifact(broken)
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(
        ArtifactError, match=re.escape("neither an .mlpackage, a model.mil nor an .mlmodelc")
    ):
        open_artifact(empty)
