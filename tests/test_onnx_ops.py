"""Every op the ONNX importer lowers, in small graphs written with onnx.helper, each verified
against onnxruntime (CPU, float32) within its tolerance; at two opsets where the op's spelling
changed. Cases are batched per family (one test runs many graphs) to keep the suite fast; a
failure lists every failing case."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_support import Case, check, one, op, rng_array, run_all

X = {"x": [2, 3, 8]}
X4 = {"x": [1, 4, 6, 6]}


def _f(value) -> np.ndarray:
    return np.asarray(value, np.float32)


def _i(value) -> np.ndarray:
    return np.asarray(value, np.int64)


ELEMENTWISE = [
    one("add", "Add", {"x": [2, 3, 8], "z": [2, 3, 8]}),
    one("add_broadcast_const", "Add", X, {"b": rng_array([8])}),
    one("sub_const_first", "Sub", X, {"c": rng_array([3, 1])}, args=["c", "x"]),
    one("mul", "Mul", {"x": [2, 3, 8], "z": [3, 8]}),
    one("div_scalar", "Div", X, {"s": _f(8.0)}),
    one("neg", "Neg", X),
    one("abs", "Abs", X),
    one("relu", "Relu", X),
    one("sigmoid", "Sigmoid", X),
    one("tanh", "Tanh", X),
    one("exp", "Exp", X),
    one("max3", "Max", {"x": [2, 8], "z": [2, 8], "w": [8]}),
    one("min2", "Min", {"x": [2, 8], "z": [2, 8]}),
    one("sum3", "Sum", {"x": [2, 8], "z": [2, 8], "w": [2, 8]}),
    one("mean2", "Mean", {"x": [2, 8], "z": [2, 8]}),
    one("softmax_last", "Softmax", X),
    one("softmax_axis1", "Softmax", X, axis=1),
    one("softmax_13", "Softmax", X, opset=13),
    one("gelu_exact_20", "Gelu", X, opset=20),
    one("gelu_tanh_20", "Gelu", X, opset=20, approximate="tanh"),
    one("leaky_relu", "LeakyRelu", X, alpha=0.1),
    one("prelu", "PRelu", {"x": [1, 3, 4]}, {"s": _f([[0.1], [0.2], [0.3]])}),
    one("hard_sigmoid", "HardSigmoid", X, alpha=0.3, beta=0.4),
    one("hard_swish", "HardSwish", X, opset=14),
    one("clip", "Clip", X, {"lo": _f(-0.5), "hi": _f(0.7)}),
    one("clip_max_only", "Clip", X, {"hi": _f(0.7)}, args=["x", "", "hi"]),
    one("softsign", "Softsign", X),
    one("identity", "Identity", X),
    one("dropout", "Dropout", X),
    Case(
        "sqrt_reciprocal",
        [
            op("Abs", ["x"], ["a"]),
            op("Add", ["a", "one"], ["p"]),
            op("Sqrt", ["p"], ["s"]),
            op("Reciprocal", ["s"]),
        ],
        X,
        consts={"one": _f(1.0)},
    ),
    *(
        Case(
            f"pow_{name}",
            [op("Abs", ["x"], ["a"]), op("Add", ["a", "one"], ["p"]), op("Pow", ["p", "e"])],
            X,
            consts={"one": _f(1.0), "e": _f(e)},
        )
        for name, e in (
            ("2", 2),
            ("3", 3),
            ("half", 0.5),
            ("minus_half", -0.5),
            ("minus_1", -1),
            ("1", 1),
        )
    ),
    Case(
        "int64_mask_input",
        [op("Cast", ["mask"], ["m"], to=TensorProto.FLOAT), op("Mul", ["x", "m"])],
        {"x": [2, 8], "mask": [2, 8]},
        input_types={"mask": TensorProto.INT64},
    ),
    Case(
        "cast_int_and_back",
        [
            op("Cast", ["x"], ["i"], to=TensorProto.INT64),
            op("Cast", ["i"], ["y"], to=TensorProto.FLOAT),
        ],
        X,
    ),
]

ERF = math.sqrt(2.0)


def _gelu_erf(name: str, grouping: str) -> Case:
    """x·½·(1 + erf(x/√2)) as torch writes it, in each grouping of the two products."""
    scaled = (
        op("Div", ["x", "sqrt2"], ["d"])
        if grouping != "mul_scale"
        else op("Mul", ["x", "inv"], ["d"])
    )
    head = [scaled, op("Erf", ["d"], ["e"]), op("Add", ["e", "one"], ["p"])]
    tail = {
        "xp_half": [op("Mul", ["x", "p"], ["m"]), op("Mul", ["m", "half"])],
        "x_phalf": [op("Mul", ["p", "half"], ["m"]), op("Mul", ["x", "m"])],
        "xhalf_p": [op("Mul", ["x", "half"], ["m"]), op("Mul", ["m", "p"])],
        "mul_scale": [op("Mul", ["x", "p"], ["m"]), op("Mul", ["m", "half"])],
    }[grouping]
    consts = {"sqrt2": _f(ERF), "inv": _f(1 / ERF), "one": _f(1.0), "half": _f(0.5)}
    return Case(name, [*head, *tail], X, consts=consts)


PATTERNS = [_gelu_erf(f"gelu_erf_{g}", g) for g in ("xp_half", "x_phalf", "xhalf_p", "mul_scale")]

W = rng_array([8, 5], seed=2)
NN = [
    one("matmul_const", "MatMul", X, {"w": W}),
    one("matmul_vars", "MatMul", {"x": [2, 3, 8], "z": [2, 8, 4]}),
    one("matmul_broadcast", "MatMul", {"x": [2, 3, 8], "z": [8, 4]}),
    one("matmul_vec_left", "MatMul", {"x": [8]}, {"w": W}),
    one("matmul_vec_right", "MatMul", {"x": [3, 8]}, {"v": rng_array([8])}),
    one("gemm", "Gemm", {"x": [3, 8]}, {"w": rng_array([5, 8]), "c": rng_array([5])}, transB=1),
    one(
        "gemm_alpha_beta",
        "Gemm",
        {"x": [8, 3]},
        {"w": W, "c": rng_array([3, 5])},
        transA=1,
        alpha=0.5,
        beta=2.0,
    ),
    one("gemm_no_c", "Gemm", {"x": [3, 8]}, {"w": W}),
    one(
        "conv2d",
        "Conv",
        X4,
        {"w": rng_array([8, 4, 3, 3], scale=0.3), "b": rng_array([8])},
        pads=[1, 1, 1, 1],
    ),
    one(
        "conv2d_stride_dilation",
        "Conv",
        X4,
        {"w": rng_array([4, 4, 3, 3], scale=0.3)},
        strides=[2, 2],
        dilations=[2, 1],
    ),
    one(
        "conv2d_groups_asym_pads",
        "Conv",
        X4,
        {"w": rng_array([4, 2, 3, 2], scale=0.3)},
        group=2,
        pads=[0, 1, 2, 0],
    ),
    one(
        "conv2d_same_upper",
        "Conv",
        X4,
        {"w": rng_array([4, 4, 2, 2], scale=0.3)},
        auto_pad="SAME_UPPER",
        strides=[2, 2],
    ),
    one(
        "conv2d_same_lower",
        "Conv",
        X4,
        {"w": rng_array([4, 4, 2, 2], scale=0.3)},
        auto_pad="SAME_LOWER",
    ),
    one("conv1d", "Conv", {"x": [1, 4, 10]}, {"w": rng_array([6, 4, 3], scale=0.3)}, pads=[1, 1]),
    one("conv1x1", "Conv", X4, {"w": rng_array([8, 4, 1, 1])}),
    one(
        "batch_norm",
        "BatchNormalization",
        X4,
        {
            "g": rng_array([4]),
            "b": rng_array([4]),
            "m": rng_array([4]),
            "v": np.abs(rng_array([4])) + 0.5,
        },
    ),
    one("layer_norm", "LayerNormalization", X, {"g": rng_array([8]), "b": rng_array([8])}),
    one("layer_norm_axis", "LayerNormalization", X, {"g": rng_array([3, 8])}, axis=1),
    one("instance_norm", "InstanceNormalization", X4, {"g": rng_array([4]), "b": rng_array([4])}),
    one(
        "group_norm_18",
        "GroupNormalization",
        X4,
        {"g": rng_array([2]), "b": rng_array([2])},
        opset=18,
        num_groups=2,
    ),
    one(
        "group_norm_21",
        "GroupNormalization",
        X4,
        {"g": rng_array([4]), "b": rng_array([4])},
        opset=21,
        num_groups=2,
    ),
    one("global_avg_pool", "GlobalAveragePool", X4),
    one("global_max_pool", "GlobalMaxPool", X4),
]

REDUCTIONS = [
    *(
        one(f"{o.lower()}_17", o, X, opset=17, axes=[1, -1])
        for o in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare")
    ),
    *(
        one(f"{o.lower()}_18", o, X, {"a": _i([-1])}, opset=18, keepdims=0)
        for o in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare")
    ),
    one("reducesum_13", "ReduceSum", X, {"a": _i([1])}, opset=13),
    one("reducesum_all", "ReduceSum", X, opset=13),
]

LAYOUT = [
    one("transpose", "Transpose", X, perm=[2, 0, 1]),
    one("transpose_default", "Transpose", X),
    one("reshape_zero_minus1", "Reshape", X, {"s": _i([0, -1])}),
    one("flatten", "Flatten", X4, axis=2),
    one("squeeze", "Squeeze", {"x": [2, 1, 8]}, {"a": _i([1])}, opset=13),
    one("squeeze_all", "Squeeze", {"x": [2, 1, 8, 1]}, opset=13),
    one("unsqueeze", "Unsqueeze", X, {"a": _i([0, -1])}, opset=13),
    one("concat_const", "Concat", {"x": [2, 3], "z": [2, 4]}, {"c": rng_array([2, 2])}, axis=1),
    Case(
        "split_13",
        [op("Split", ["x", "s"], ["a", "b"], axis=2)],
        X,
        ["a", "b"],
        consts={"s": _i([3, 5])},
        opset=13,
    ),
    Case(
        "split_18_uneven",
        [op("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3)],
        X,
        ["a", "b", "c"],
        opset=18,
    ),
    Case("split_13_equal", [op("Split", ["x"], ["a", "b"], axis=2)], X, ["a", "b"], opset=13),
    one(
        "slice", "Slice", X, {"s": _i([1, 0]), "e": _i([3, 100]), "a": _i([1, 2]), "st": _i([1, 2])}
    ),
    one(
        "slice_negative",
        "Slice",
        X,
        {"s": _i([-1]), "e": _i([-(2**63)]), "a": _i([2]), "st": _i([-2])},
    ),
    one("slice_no_axes", "Slice", {"x": [6, 4]}, {"s": _i([2]), "e": _i([-1])}),
    one("gather_scalar", "Gather", X, {"i": _i(1)}, axis=1),
    one("gather_list", "Gather", X, {"i": _i([[7, 0], [3, 4]])}, axis=2),
    one("gather_run", "Gather", X, {"i": _i([2, 3, 4])}, axis=2),
    one("expand", "Expand", {"x": [3, 1]}, {"s": _i([2, 3, 4])}),
    one("tile", "Tile", X, {"r": _i([1, 2, 1])}),
]

FOLDED = [
    Case(
        "shape_arithmetic",
        [
            op("Shape", ["x"], ["shape"]),
            op("Gather", ["shape", "zero"], ["batch"], axis=0),
            op("Unsqueeze", ["batch", "axes0"], ["b1"]),
            op("Concat", ["b1", "minus1"], ["target"], axis=0),
            op("Reshape", ["x", "target"], ["flat"]),
            op(
                "ConstantOfShape",
                ["two"],
                ["ones"],
                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5]),
            ),
            op("Range", ["zero", "n", "one_i"], ["r"]),
            op("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
            op("Equal", ["r", "zero"], ["is0"]),
            op("Where", ["is0", "rf", "ones_row"], ["w"]),
            op("Mul", ["flat", "w"]),
        ],
        {"x": ["batch", 3, 8]},
        consts={
            "zero": _i(0),
            "axes0": _i([0]),
            "minus1": _i([-1]),
            "two": _i([2, 24]),
            "n": _i(24),
            "one_i": _i(1),
            "ones_row": np.full(24, 2.0, np.float32),
        },
        shapes={"x": [2, 3, 8]},
    ),
    Case(
        "constant_node",
        [
            op(
                "Constant",
                [],
                ["c"],
                value=helper.make_tensor("c", TensorProto.FLOAT, [8], list(range(8))),
            ),
            op("Add", ["x", "c"]),
        ],
        X,
    ),
]


@pytest.mark.parametrize(
    "family", ["ELEMENTWISE", "PATTERNS", "NN", "REDUCTIONS", "LAYOUT", "FOLDED"]
)
def test_every_lowered_op_matches_onnxruntime(family, tmp_path):
    run_all(globals()[family], tmp_path)


def test_the_gelu_pattern_becomes_one_gelu(tmp_path):
    from onnx_support import save

    from app.language.targets import get_target
    from app.onnx.files import ModelFiles
    from app.onnx.importer import import_onnx
    from app.request import OnnxParams

    for case in PATTERNS:
        path = save(case, tmp_path)
        build = import_onnx(
            OnnxParams(model=path.name),
            ModelFiles.in_folder(path),
            target=get_target("ios18"),
            name="g",
        )
        ops = [o.type for o in build.program.main.operations if o.type != "const"]
        assert ops == ["gelu"], (case.name, ops)


def test_fp32_io_casts_at_the_edges(tmp_path):
    report = check(one("relu32", "Relu", X), tmp_path, io_dtype="fp32")
    assert report["passed"] and report["inputs"]["x"]["dtype"] == "fp32"


def test_model_local_functions_are_inlined(tmp_path):
    """torch's dynamo exporter can write model-local functions: their bodies are imported."""
    from onnx_support import model_of, verify_onnx

    from app.language.targets import get_target
    from app.onnx.files import ModelFiles
    from app.onnx.importer import import_onnx
    from app.request import OnnxParams

    body = [op("Relu", ["a"], ["r"]), op("Neg", ["r"], ["b"])]
    function = helper.make_function(
        "local", "Act", ["a"], ["b"], body, [helper.make_opsetid("", 17)]
    )
    model = model_of(Case("f", [helper.make_node("Act", ["x"], ["y"], domain="local")], X))
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(function)
    path = tmp_path / "f.onnx"
    path.write_bytes(model.SerializeToString())
    build = import_onnx(
        OnnxParams(model=path.name),
        ModelFiles.in_folder(path),
        target=get_target("ios18"),
        name="f",
    )
    assert [o.type for o in build.program.main.operations if o.type != "const"] == ["relu", "mul"]
    assert verify_onnx(build)["passed"]


def test_int64_inputs_are_int32_and_drawn_as_masks(tmp_path):
    case = next(c for c in ELEMENTWISE if c.name == "int64_mask_input")
    report = check(case, tmp_path)
    assert report["passed"]
    assert report["inputs"]["mask"]["dtype"] == "int32"
    assert report["inputs"]["mask"]["distribution"] == "uniform integers in [0, 2)"
