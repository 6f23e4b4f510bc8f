"""model.mil spelling: golden files per op, and the exact lines Apple's compiler emits."""

import os
from pathlib import Path

import numpy as np
import pytest
from kernel_cases import SMALL

from app.catalog_build import build_kernel
from app.language.hexfloat import format_hex as hex_float
from app.mil import Builder, DType, emit_text
from app.packaging import build_info, plan_weights

GOLDEN = Path(__file__).parent / "golden"
FIXED_INFO = {
    "coremltools-version": "9.0"
}  # golden files must not change with the installed version


def _text(build) -> str:
    _, offsets = plan_weights(build.program)
    return emit_text(build.program, offsets, FIXED_INFO)


@pytest.mark.parametrize("op", sorted(SMALL))
def test_golden_text(op):
    text = _text(build_kernel(op, SMALL[op], random_seed=0))
    path = GOLDEN / f"{op}.mil"
    if os.environ.get("UPDATE_GOLDEN") == "1":  # regenerate, then review the diff by eye
        path.write_text(text)
    assert text == path.read_text(), (
        f"model.mil for {op} changed; inspect and regenerate the golden file"
    )


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (0.125, "0x1p-3"),
        (-10000.0, "-0x1.388p+13"),
        (1.0, "0x1p+0"),
        (0.0, "0x0p+0"),
        (-65504.0, "-0x1.ffcp+15"),
    ],
)
def test_hex_floats(value, spelled):
    assert hex_float(value) == spelled
    assert float.fromhex(spelled) == value


def test_non_finite_floats_are_spelled_as_apple_prints_them():
    # `-inf` is in Apple's goldens; C's %a gives `inf` and (BSD printf) `nan` for every NaN
    assert [hex_float(v) for v in (float("-inf"), float("inf"), float("nan"))] == [
        "-inf",
        "inf",
        "nan",
    ]


def _three_fp32_consts(target: str) -> str:
    """coremltools' test_weights.py program: three fp32[500] consts, the first two identical."""
    b = Builder(target)
    x = b.input("x", DType.FP32, (500,))
    same = np.arange(500, dtype=np.float32)
    y = b.op("add", "add_0", x=x, y=b.const("const_1", same, DType.FP32))
    y = b.op("add", "add_1", x=y, y=b.const("const_2", same.copy(), DType.FP32))
    y = b.op("add", "add_2", x=y, y=b.const("const_3", same + 1, DType.FP32))
    program = b.build([y])
    _, offsets = plan_weights(program)
    assert [offsets[n] for n in ("const_1", "const_2", "const_3")] == [64, 64, 2176]
    return emit_text(program, offsets, build_info())


def test_blobfile_lines_match_compiler_output_ios18():
    text = _three_fp32_consts("ios18")
    line = (
        'tensor<fp32, [500]> const_3 = const()[name = string("const_3"), val = tensor<fp32, [500]>'
        '(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(2176)))];'
    )
    assert line in text
    assert "add(x = x, y = const_1)" in text and "add(x = add_0, y = const_2)" in text
    assert text.startswith("program(1.3)\n[buildInfo = dict<string, string>({")
    assert "    func main<ios18>(tensor<fp32, [500]> x) {" in text


def test_blobfile_lines_match_compiler_output_ios17():
    text = _three_fp32_consts("ios17")
    line = (
        'const()[name = tensor<string, []>("const_3"), val = tensor<fp32, [500]>(BLOBFILE(path = '
        'tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(2176)))];'
    )
    assert line in text
    assert text.startswith(
        "program(1.0)\n[buildInfo = dict<tensor<string, []>, tensor<string, []>>({"
    )
    assert "func main<ios17>" in text


def test_conv_spelling_matches_the_seed_examples():
    text = _text(
        build_kernel("conv", {"in_channels": 4, "out_channels": 8, "spatial": 1}, random_seed=0)
    )
    assert "tensor<fp16, [1, 4, 1, 1]> x" in text
    assert "tensor<fp16, [8, 4, 1, 1]> weight = const()" in text and "offset = uint64(64)" in text
    assert (
        "conv(dilations = y_dilations, groups = y_groups, pad = y_pad, pad_type = y_pad_type, "
        "strides = y_strides, weight = weight, x = x)" in text
    )
    assert (
        'string y_pad_type = const()[name = string("y_pad_type"), val = string("valid")];' in text
    )
    wide = _text(
        build_kernel("conv", {"in_channels": 16, "out_channels": 16, "spatial": 4}, random_seed=0)
    )
    assert "tensor<fp16, [1, 16, 1, 4]> x" in wide and "tensor<fp16, [16, 16, 1, 1]> weight" in wide


def test_rmsnorm_spelling_avoids_the_known_rejections():
    text = _text(build_kernel("rmsnorm", {"channels": 16, "spatial": 2}, random_seed=0))
    assert "keep_dims = keep_dims" in text and "keep_dims = bool(" not in text
    assert 'bool keep_dims = const()[name = string("keep_dims"), val = bool(true)];' in text
    assert "tensor<fp16, [1, 16, 1, 1]> weight = const()" in text  # [1, C, 1, 1], never [C]
    assert "tensor<fp16, [16]>" not in text


def test_sdpa_spelling_has_no_scale_argument():
    # The op divides by √head_dim itself: the default scale needs no multiply...
    text = _text(build_kernel("sdpa", {"n_heads": 2, "head_dim": 16, "seq_len": 4}, random_seed=0))
    assert "scaled_dot_product_attention(key = k, query = q, value = v)" in text
    assert "mul(" not in text and "scale =" not in text
    # ...and another scale multiplies Q by scale·√head_dim (0.5·4 = 2).
    text = _text(build_kernel("sdpa", {"n_heads": 2, "head_dim": 16, "seq_len": 4, "scale": 0.5}))
    assert 'fp16 q_scaled_y = const()[name = string("q_scaled_y"), val = fp16(0x1p+1)];' in text
    assert "scaled_dot_product_attention(key = k, query = q_scaled, value = v)" in text
    assert "mul(x = q, y = q_scaled_y)" in text and "scale =" not in text
    causal = _text(
        build_kernel(
            "sdpa", {"n_heads": 1, "head_dim": 4, "seq_len": 2, "causal": True}, random_seed=0
        )
    )
    assert "scaled_dot_product_attention" not in causal and "softmax(axis = probs_axis" in causal


def test_state_spelling():
    text = _text(build_kernel("update_state", {"state_name": "kv", "shape": [1, 1, 4, 64]}))
    assert "state<tensor<fp16, [1, 1, 4, 64]>> kv" in text
    assert "read_state(input = kv)" in text and "write_state(data = value, input = kv)" in text
    assert "coreml_update_state" not in text
