"""The ONNX ops lowered onto the primitives added as records after the importer's first phase:
each in small graphs written with onnx.helper, verified against onnxruntime (CPU, float32), at
two opsets where the op's spelling changed. Batched per family as tests/test_onnx_ops.py is."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx_support import Case, one, op, rng_array, run_all

X = {"x": [2, 3, 8]}
X4 = {"x": [1, 4, 6, 6]}
BOOL, INT64 = TensorProto.BOOL, TensorProto.INT64


def _f(value) -> np.ndarray:
    return np.asarray(value, np.float32)


def _i(value) -> np.ndarray:
    return np.asarray(value, np.int64)


def _positive(name: str, op_type: str, **attrs) -> Case:
    """op(|x| + 0.5): an op defined for positive inputs."""
    nodes = [
        op("Abs", ["x"], ["a"]),
        op("Add", ["a", "half"], ["p"]),
        op(op_type, ["p"], **attrs),
    ]
    return Case(name, nodes, X, consts={"half": _f(0.5)})


MATH = [
    one("erf", "Erf", X),
    _positive("log", "Log"),
    one("floor", "Floor", X),
    one("ceil", "Ceil", X),
    Case(
        "round_halves",  # halves to even, as ONNX rounds
        [
            op("Mul", ["x", "four"], ["m"]),
            op("Floor", ["m"], ["f"]),
            op("Mul", ["f", "half"], ["h"]),
            op("Round", ["h"]),
        ],
        X,
        consts={"four": _f(4.0), "half": _f(0.5)},
    ),
    one("sign", "Sign", X),
    one("sin", "Sin", X),
    one("cos", "Cos", X),
    one("tan", "Tan", {"x": [64]}),
    one("atan", "Atan", X),
    *(
        Case(  # tanh keeps x inside asin's and acos's domain
            f"{o.lower()}_{opset}",
            [op("Tanh", ["x"], ["t"]), op(o, ["t"])],
            X,
            opset=opset,
        )
        for o in ("Asin", "Acos")
        for opset in (13, 20)
    ),
    Case(  # C's fmod: the dividend's sign; divisors of either sign
        "fmod_const_13",
        [op("Mod", ["x", "d"], fmod=1)],
        X,
        consts={"d": _f([1.5, -0.75, 2.0, -1.25, 0.5, 3.0, -2.5, 1.0])},
        opset=13,
    ),
    Case(
        "fmod_data",
        [op("Abs", ["z"], ["a"]), op("Add", ["a", "half"], ["d"]), op("Mod", ["x", "d"], fmod=1)],
        {"x": [2, 8], "z": [2, 8]},
        consts={"half": _f(0.5)},
    ),
    *(
        Case(  # integers: ids spread over [-9, 9], divisors of either sign
            f"mod_int_fmod{fmod}",
            [
                op("Mul", ["ids", "spread"], ["s"]),
                op("Sub", ["s", "shift"], ["v"]),
                op("Mod", ["v", "d"], ["m"], fmod=fmod),
                op("Cast", ["m"], ["y"], to=TensorProto.FLOAT),
            ],
            {"ids": [2, 5]},
            consts={
                "spread": _i([9, 7, 5, 3, 8]),
                "shift": _i([4, 1, 2, 6, -1]),
                "d": _i([3, -4, 2, 5, -3]),
            },
            input_types={"ids": INT64},
        )
        for fmod in (0, 1)
    ),
    one("softplus", "Softplus", X),
    one("mish", "Mish", X, opset=18),
    one("elu", "Elu", X, alpha=0.7),
    one("selu", "Selu", X),
    one("selu_params", "Selu", X, alpha=1.5, gamma=0.9),
    one("celu", "Celu", X, alpha=2.0),
    one("celu_default", "Celu", X),
    one("log_softmax", "LogSoftmax", X),
    one("log_softmax_axis1_13", "LogSoftmax", X, opset=13, axis=1),
    one("leaky_relu_steep", "LeakyRelu", X, alpha=1.5),
    Case(
        "pow_const_exponent",
        [op("Abs", ["x"], ["a"]), op("Add", ["a", "one"], ["p"]), op("Pow", ["p", "e"])],
        X,
        consts={"one": _f(1.0), "e": _f(1.7)},
    ),
    Case(
        "pow_int_exponent_15",
        [op("Pow", ["x", "e"])],
        X,
        consts={"e": _i(4)},
        opset=15,
    ),
    # a constant base: 2 ** x, and a per-element base
    Case("pow_const_base", [op("Pow", ["two", "x"])], X, consts={"two": _f(2.0)}),
    Case(
        "pow_const_base_array",
        [op("Pow", ["b", "x"])],
        {"x": [2, 8]},
        consts={"b": np.linspace(0.5, 3.0, 8, dtype=np.float32)},
    ),
    Case(
        "pow_data_exponent",
        [op("Abs", ["x"], ["a"]), op("Add", ["a", "one"], ["p"]), op("Pow", ["p", "z"])],
        {"x": [2, 8], "z": [2, 8]},
        consts={"one": _f(1.0)},
    ),
]

LOGIC = [
    *(
        Case(
            f"{o.lower()}_{opset}",
            [op(o, ["x", "z"], ["b"]), op("Cast", ["b"], ["y"], to=TensorProto.FLOAT)],
            {"x": [2, 8], "z": [8]},
            opset=opset,
        )
        for o in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
        for opset in (13, 19)
    ),
    Case(
        "compare_const_bool_out",
        [op("Greater", ["x", "c"])],
        X,
        consts={"c": _f(0.25)},
        output_types={"y": BOOL},
    ),
    Case(
        "equal_int_input",
        [op("Equal", ["ids", "c"], ["b"]), op("Cast", ["b"], ["y"], to=TensorProto.FLOAT)],
        {"ids": [2, 8]},
        consts={"c": _i(1)},
        input_types={"ids": INT64},
    ),
    *(
        Case(
            f"logical_{o.lower()}",
            [
                op("Greater", ["x", "zero"], ["p"]),
                op("Less", ["z", "zero"], ["q"]),
                op(o, ["p", "q"], ["b"]),
                op("Cast", ["b"], ["y"], to=TensorProto.FLOAT),
            ],
            {"x": [2, 8], "z": [2, 8]},
            consts={"zero": _f(0.0)},
        )
        for o in ("And", "Or", "Xor")
    ),
    Case(
        "equal_bools_not",
        [
            op("Greater", ["x", "zero"], ["p"]),
            op("Less", ["z", "zero"], ["q"]),
            op("Equal", ["p", "q"], ["e"]),
            op("Not", ["e"], ["b"]),
            op("Cast", ["b"], ["y"], to=TensorProto.FLOAT),
        ],
        {"x": [2, 8], "z": [2, 8]},
        consts={"zero": _f(0.0)},
    ),
    Case(
        "where_data",
        [op("Greater", ["x", "zero"], ["c"]), op("Where", ["c", "x", "z"])],
        {"x": [2, 8], "z": [8]},
        consts={"zero": _f(0.0)},
    ),
    Case(
        "where_const_branch",  # a mask filled with a large negative value, as attention masks
        [op("Greater", ["x", "zero"], ["c"]), op("Where", ["c", "x", "fill"])],
        X,
        consts={"zero": _f(0.0), "fill": _f(-10000.0)},
        opset=16,
    ),
    Case(
        "where_const_cond",
        [op("Where", ["c", "x", "z"])],
        {"x": [2, 8], "z": [2, 8]},
        consts={"c": np.array([True, False] * 4)},
    ),
    Case(
        "isnan_isinf",
        [
            op("Div", ["x", "zero"], ["d"]),  # ±inf, and NaN where x is 0
            op("IsNaN", ["d"], ["n"]),
            op("IsInf", ["d"], ["i"]),
            op("IsInf", ["d"], ["p"], detect_negative=0),
            op("IsInf", ["d"], ["m"], detect_positive=0),
            op("Cast", ["n"], ["y"], to=TensorProto.FLOAT),
            op("Cast", ["i"], ["y2"], to=TensorProto.FLOAT),
            op("Cast", ["p"], ["y3"], to=TensorProto.FLOAT),
            op("Cast", ["m"], ["y4"], to=TensorProto.FLOAT),
        ],
        {"x": [2, 8]},
        ["y", "y2", "y3", "y4"],
        consts={"zero": _f(0.0)},
    ),
    one("thresholded_relu", "ThresholdedRelu", X, alpha=0.3),
    one("shrink", "Shrink", X, lambd=0.4, bias=0.1),
]


IDS = {"ids": [2, 5]}
INT_IDS = {"ids": INT64}


def _ids(name, nodes, inputs=None, **more) -> Case:
    return Case(name, nodes, {**IDS, **(inputs or {})}, input_types=INT_IDS, **more)


INDEXING = [
    _ids(  # small table: one-hot product
        "embedding_one_hot", [op("Gather", ["table", "ids"])], consts={"table": rng_array([2, 8])}
    ),
    _ids(  # a vocabulary: gather
        "embedding_gather",
        [op("Gather", ["table", "ids"])],
        consts={"table": rng_array([2100, 8])},
    ),
    _ids(
        "gather_negative_ids",
        [op("Sub", ["ids", "two"], ["neg"]), op("Gather", ["table", "neg"])],
        consts={"table": rng_array([2, 8]), "two": _i(2)},
    ),
    _ids(
        "gather_of_data_axis1",
        [op("Gather", ["x", "ids"], axis=1)],
        {"x": [3, 2, 4]},
    ),
    Case(
        "gather_elements",
        [op("GatherElements", ["x", "i"], axis=1)],
        {"x": [3, 4]},
        consts={"i": _i([[0, -1, 2], [3, 3, 0], [1, 2, -4]])},
    ),
    _ids(
        "gather_elements_data_indices",
        [op("GatherElements", ["x", "ids"], axis=0)],
        {"x": [2, 5]},
    ),
    Case(
        "gather_nd",
        [op("GatherND", ["x", "i"])],
        {"x": [3, 4, 5]},
        consts={"i": _i([[0, 1], [2, -1]])},
    ),
    Case(
        "gather_nd_batch_12",
        [op("GatherND", ["x", "i"], batch_dims=1)],
        {"x": [2, 4, 5]},
        consts={"i": _i([[[1]], [[3]]])},
        opset=13,
    ),
    Case(
        "scatter_elements_13",
        [op("ScatterElements", ["x", "i", "u"], axis=1)],
        {"x": [3, 4], "u": [3, 2]},
        consts={"i": _i([[0, 2], [1, 3], [3, 0]])},
        opset=13,
    ),
    Case(
        "scatter_elements_add_18",
        [op("ScatterElements", ["x", "i", "u"], axis=0, reduction="add")],
        {"x": [3, 4], "u": [2, 4]},
        consts={"i": _i([[0, 1, 2, 0], [0, 0, 1, -1]])},
        opset=18,
    ),
    Case(
        "scatter_nd",
        [op("ScatterND", ["x", "i", "u"])],
        {"x": [4, 3, 2], "u": [2, 2]},
        consts={"i": _i([[1, 0], [3, 2]])},
    ),
    Case(
        "scatter_nd_mul_16",
        [op("ScatterND", ["x", "i", "u"], reduction="mul")],
        {"x": [4, 3], "u": [2, 3]},
        consts={"i": _i([[2], [-1]])},
        opset=16,
    ),
    Case(  # indices computed from the data, negative ones among them
        "scatter_nd_computed_13",
        [
            op("Add", ["ids", "off"], ["p"]),
            op("Sub", ["p", "four"], ["i"]),
            op("ScatterND", ["x", "i", "u"]),
        ],
        {"x": [4, 3], "ids": [2, 1], "u": [2, 3]},
        consts={"off": _i([[0], [2]]), "four": _i(4)},
        input_types=INT_IDS,
        opset=13,
    ),
    *(
        Case(  # two coordinates each; two may name one element, which then combines
            f"scatter_nd_computed_{reduction}_{opset}",
            [
                op("Add", ["ids", "off"], ["i"]),
                op("ScatterND", ["x", "i", "u"], reduction=reduction),
            ],
            {"x": [5, 4, 2], "ids": [3, 2], "u": [3, 2]},
            consts={"off": _i([[0, 0], [2, 1], [3, 2]])},
            input_types=INT_IDS,
            opset=opset,
        )
        for reduction, opset in (("add", 16), ("max", 18), ("min", 18))
    ),
    _ids(
        "one_hot",
        [op("OneHot", ["ids", "depth", "values"], axis=1)],
        consts={"depth": _i(4), "values": _f([-1.0, 3.0])},
    ),
    *(
        one(
            f"trilu_{'upper' if up else 'lower'}_{k}",
            "Trilu",
            {"x": [2, 5, 6]},
            {"k": _i(k)},
            opset=14,
            upper=up,
        )
        for up in (0, 1)
        for k in (-2, 0, 1)
    ),
    one("trilu_default", "Trilu", {"x": [5, 6]}, opset=14),
    Case(
        "topk",
        [
            op("TopK", ["x", "k"], ["v", "i"], axis=1),
            op("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        ],
        {"x": [3, 8]},
        ["v", "fi"],
        consts={"k": _i([3])},
    ),
    Case(
        "topk_smallest",
        [
            op("TopK", ["x", "k"], ["v", "i"], largest=0),
            op("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        ],
        {"x": [3, 8]},
        ["v", "fi"],
        consts={"k": _i([2])},
    ),
    *(
        Case(
            f"{o.lower()}_{'last' if last else 'first'}",
            [
                op(o, ["x"], ["a"], axis=1, keepdims=keep, select_last_index=last),
                op("Cast", ["a"], ["y"], to=TensorProto.FLOAT),
            ],
            {"x": [2, 6, 3]},
        )
        for o in ("ArgMax", "ArgMin")
        for last, keep in ((0, 1), (1, 0))
    ),
    Case(
        "argmax_ties_last",  # ties: the last index of the largest
        [
            op("Floor", ["x"], ["f"]),
            op("ArgMax", ["f"], ["a"], axis=-1, select_last_index=1),
            op("Cast", ["a"], ["y"], to=TensorProto.FLOAT),
        ],
        {"x": [4, 16]},
    ),
    one("cumsum", "CumSum", X, {"a": _i(1)}),
    one("cumsum_exclusive_reverse", "CumSum", X, {"a": _i(-1)}, exclusive=1, reverse=1),
]


def _positive_reduce(name: str, op_type: str, opset: int, **attrs) -> Case:
    nodes = [op("Abs", ["x"], ["a"]), op("Add", ["a", "half"], ["p"])]
    if opset >= 18:
        nodes.append(op(op_type, ["p", "axes"], **attrs))
        consts = {"half": _f(0.5), "axes": _i([1])}
    else:
        nodes.append(op(op_type, ["p"], axes=[1], **attrs))
        consts = {"half": _f(0.5)}
    return Case(name, nodes, X, consts=consts, opset=opset)


REDUCTIONS = [
    *(
        _positive_reduce(f"{o.lower()}_{opset}", o, opset, keepdims=keep)
        for o in ("ReduceProd", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp")
        for opset, keep in ((13, 1), (18, 0))
    ),
    one("reduce_log_sum_exp_all", "ReduceLogSumExp", X, opset=18),
]

SPATIAL = [
    one("pad_constant_13", "Pad", X4, {"p": _i([0, 0, 1, 2, 0, 0, 2, 1]), "v": _f(0.5)}, opset=13),
    one("pad_reflect", "Pad", X4, {"p": _i([0, 0, 2, 1, 0, 0, 1, 2])}, mode="reflect"),
    one("pad_edge", "Pad", X4, {"p": _i([0, 0, 0, 3, 0, 0, 0, 1])}, mode="edge"),
    one("pad_negative", "Pad", X4, {"p": _i([0, 0, -1, 2, 0, 0, 1, -2])}),
    Case(
        "pad_axes_18",
        [op("Pad", ["x", "p", "", "a"])],
        X4,
        consts={"p": _i([1, 2, 3, 0]), "a": _i([-1, 2])},
        opset=18,
    ),
    one("avg_pool", "AveragePool", X4, kernel_shape=[2, 2], strides=[2, 2]),
    one("avg_pool_pads", "AveragePool", X4, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    one(
        "avg_pool_pads_counted_19",
        "AveragePool",
        X4,
        opset=19,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        count_include_pad=1,
    ),
    one("avg_pool_same_upper", "AveragePool", X4, kernel_shape=[3, 2], auto_pad="SAME_UPPER"),
    one(
        "avg_pool_ceil",
        "AveragePool",
        {"x": [1, 2, 7, 7]},
        kernel_shape=[2, 2],
        strides=[2, 2],
        ceil_mode=1,
    ),
    one("lp_normalization_2", "LpNormalization", X4),
    one("lp_normalization_1_axis1", "LpNormalization", X4, axis=1, p=1),
    Case(  # a zero vector: zeros, as onnxruntime gives it, not a division by zero
        "lp_normalization_of_zeros",
        [
            op("Relu", ["x"], ["r"]),
            op("Neg", ["r"], ["n"]),
            op("Relu", ["n"], ["z"]),
            op("Mul", ["z", "x"], ["zz"]),
            op("LpNormalization", ["zz"], axis=0),
        ],
        {"x": [1, 4]},
    ),
    one("mean_variance_normalization", "MeanVarianceNormalization", X4),
    one("mean_variance_normalization_axes", "MeanVarianceNormalization", X4, axes=[1, -1]),
    # ceil mode, a kernel smaller than its stride, no pads: ONNX drops the last window, which
    # would start past the input; MIL keeps it (it drops it only with pads)
    one(
        "avg_pool_ceil_past_the_input",
        "AveragePool",
        {"x": [1, 2, 5, 4]},
        kernel_shape=[1, 1],
        strides=[1, 2],
        ceil_mode=1,
    ),
    one(
        "max_pool_ceil_past_the_input",
        "MaxPool",
        {"x": [1, 2, 5, 5]},
        kernel_shape=[1, 2],
        strides=[3, 3],
        ceil_mode=1,
    ),
    one("avg_pool_1d", "AveragePool", {"x": [1, 3, 9]}, kernel_shape=[3], strides=[2]),
    one("max_pool", "MaxPool", X4, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    one(
        "max_pool_ceil",
        "MaxPool",
        {"x": [1, 2, 7, 7]},
        kernel_shape=[3, 3],
        strides=[2, 2],
        ceil_mode=1,
    ),
    one(
        "max_pool_same_lower_13",
        "MaxPool",
        X4,
        opset=13,
        kernel_shape=[2, 2],
        auto_pad="SAME_LOWER",
    ),
    one("lp_pool_2", "LpPool", X4, kernel_shape=[2, 2], strides=[2, 2]),
    one("lp_pool_1_pads_18", "LpPool", X4, opset=18, p=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    one(
        "conv_transpose",
        "ConvTranspose",
        X4,
        {"w": rng_array([4, 3, 3, 3], scale=0.3), "b": rng_array([3])},
        strides=[2, 2],
    ),
    one(
        "conv_transpose_pads_output_padding",
        "ConvTranspose",
        X4,
        {"w": rng_array([4, 2, 3, 3], scale=0.3)},
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        output_padding=[1, 0],
    ),
    one(
        "conv_transpose_groups_dilations",
        "ConvTranspose",
        X4,
        {"w": rng_array([4, 1, 2, 2], scale=0.3)},
        group=2,
        dilations=[2, 1],
    ),
    one(
        "conv_transpose_output_shape",
        "ConvTranspose",
        X4,
        {"w": rng_array([4, 2, 3, 3], scale=0.3)},
        strides=[2, 2],
        output_shape=[12, 11],
    ),
    *(
        one(
            f"conv_transpose_{auto.lower()}",
            "ConvTranspose",
            {"x": [1, 2, 5, 5]},
            {"w": rng_array([2, 2, 4, 3], scale=0.3)},
            strides=[2, 2],
            auto_pad=auto,
        )
        for auto in ("SAME_UPPER", "SAME_LOWER")
    ),
    one(
        "conv_transpose_1d",
        "ConvTranspose",
        {"x": [1, 4, 10]},
        {"w": rng_array([4, 2, 4], scale=0.3)},
        strides=[2],
        pads=[1, 1],
    ),
    one("depth_to_space_dcr", "DepthToSpace", {"x": [1, 8, 3, 2]}, blocksize=2),
    one(
        "depth_to_space_crd_13",
        "DepthToSpace",
        {"x": [1, 8, 3, 2]},
        opset=13,
        blocksize=2,
        mode="CRD",
    ),
    one("space_to_depth", "SpaceToDepth", X4, blocksize=3),
    Case(
        "resize_nearest_torch_13",
        [
            op(
                "Resize",
                ["x", "", "s"],
                coordinate_transformation_mode="asymmetric",
                mode="nearest",
                nearest_mode="floor",
            )
        ],
        X4,
        consts={"s": _f([1, 1, 2, 3])},
        opset=13,
    ),
    Case(
        "resize_nearest_default_18",
        [op("Resize", ["x", "", "s"])],
        X4,
        consts={"s": _f([1, 1, 2, 2])},
        opset=18,
    ),
    Case(
        "resize_nearest_sizes_axes_18",
        [
            op(
                "Resize",
                ["x", "", "", "z"],
                axes=[2, 3],
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        ],
        X4,
        consts={"z": _i([9, 12])},
        opset=18,
    ),
    # nearest where MIL's upsampling reads other rows: a gather of ONNX's rows, axis by axis
    *(
        Case(
            f"resize_nearest_{coords}_{rounding}",
            [
                op(
                    "Resize",
                    ["x", "", "s"],
                    coordinate_transformation_mode=coords,
                    nearest_mode=rounding,
                )
            ],
            X4,
            consts={"s": _f([1, 1, 1.5, 0.6])},
            opset=18,
        )
        for coords, rounding in (
            ("half_pixel", "round_prefer_ceil"),
            ("align_corners", "round_prefer_floor"),
            ("tf_half_pixel_for_nn", "ceil"),
            ("pytorch_half_pixel", "floor"),
            ("asymmetric", "floor"),
        )
    ),
    Case(  # the channels too, and an axis of 1D audio-like features
        "resize_nearest_channels_and_length",
        [op("Resize", ["x", "", "", "z"], nearest_mode="floor")],
        {"x": [1, 3, 10]},
        consts={"z": _i([1, 6, 7])},
        opset=18,
    ),
    Case(  # sizes whose ratio, stored in fp32, would upsample to one row short (7 of 5·1.4)
        "resize_nearest_sizes_fp32_ratio",
        [
            op(
                "Resize",
                ["x", "", "", "z"],
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        ],
        {"x": [1, 2, 5, 5]},
        consts={"z": _i([1, 2, 1, 7])},
        opset=18,
    ),
    Case(  # a scale that keeps the size: onnxruntime copies the input
        "resize_nearest_same_size",
        [op("Resize", ["x", "", "s"], nearest_mode="floor")],
        {"x": [1, 2, 3, 4]},
        consts={"s": _f([1, 1, 1.3, 1.2])},
        opset=18,
    ),
    *(
        Case(
            f"resize_linear_{coords}",
            [op("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode=coords)],
            X4,
            consts={"s": _f([1, 1, 2, 1.5])},
            opset=13,
        )
        for coords in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
    ),
    *(  # a grid of standard normal points: many beyond [-1, 1], where the padding shows
        Case(
            f"grid_sample_{name}",
            [op("GridSample", ["x", "grid"], **attrs)],
            {"x": [2, 3, 4, 5], "grid": [2, 3, 6, 2]},
            opset=opset,
        )
        for name, opset, attrs in (
            ("default_16", 16, {}),
            ("border_aligned_16", 16, {"padding_mode": "border", "align_corners": 1}),
            ("nearest_reflection_16", 16, {"mode": "nearest", "padding_mode": "reflection"}),
            ("linear_20", 20, {"mode": "linear", "padding_mode": "reflection", "align_corners": 1}),
            ("nearest_zeros_aligned_20", 20, {"mode": "nearest", "align_corners": 1}),
        )
    ),
    Case(
        "grid_sample_const_grid",
        [op("GridSample", ["x", "grid"], mode="bilinear", padding_mode="border")],
        X4,
        consts={"grid": rng_array([1, 5, 5, 2], seed=4, scale=0.8)},
    ),
    Case(  # the third region reaches beyond the map: clamped within a pixel, 0 further out
        "roi_align_16",
        [op("RoiAlign", ["x", "rois", "b"], output_height=2, output_width=3, sampling_ratio=2)],
        {"x": [1, 3, 6, 7]},
        consts={
            "rois": _f([[0.5, 1.0, 4.0, 5.0], [2.0, 0.0, 6.5, 3.0], [-2.5, -3.0, 3.0, 2.5]]),
            "b": _i([0, 0, 0]),
        },
        opset=16,
    ),
    Case(  # opset 13's coordinates (no half-pixel shift); an adaptive sampling ratio
        "roi_align_adaptive_13",
        [op("RoiAlign", ["x", "rois", "b"], output_height=2, output_width=2, spatial_scale=0.5)],
        {"x": [1, 2, 6, 6]},
        consts={"rois": _f([[0.0, 1.0, 7.0, 8.0], [3.0, 2.0, 10.0, 9.0]]), "b": _i([0, 0])},
        opset=13,
    ),
    Case(  # regions computed from the data: their sample points in the program
        "roi_align_computed_rois",
        [
            op("Abs", ["r"], ["a"]),
            op("Mul", ["a", "spread"], ["m"]),
            op("Add", ["m", "base"], ["rois"]),
            op(
                "RoiAlign",
                ["x", "rois", "b"],
                output_height=2,
                output_width=2,
                sampling_ratio=2,
                coordinate_transformation_mode="output_half_pixel",
            ),
        ],
        {"x": [1, 2, 5, 6], "r": [3, 4]},
        consts={
            "spread": _f([0.5, 0.5, 1.0, 1.0]),
            "base": _f([[0.0, 0.0, 2.0, 2.0], [1.0, 1.5, 4.0, 3.0], [-1.5, 0.0, 2.0, 5.0]]),
            "b": _i([0, 0, 0]),
        },
        opset=17,
    ),
    Case(  # regions of both images, out of order; the middle one partly beyond the map
        "roi_align_two_images",
        [op("RoiAlign", ["x", "rois", "b"], output_height=2, output_width=3, sampling_ratio=2)],
        {"x": [2, 3, 6, 7]},
        consts={
            "rois": _f([[0.5, 1.0, 4.0, 5.0], [-2.5, -3.0, 3.0, 2.5], [2.0, 0.0, 6.5, 3.0]]),
            "b": _i([1, 0, 1]),
        },
        opset=16,
    ),
    Case(  # every region in the second of three images: that image read alone
        "roi_align_one_of_three_images",
        [op("RoiAlign", ["x", "rois", "b"], output_height=2, output_width=2, sampling_ratio=1)],
        {"x": [3, 2, 5, 5]},
        consts={"rois": _f([[0.0, 0.0, 3.0, 4.0], [1.0, 2.0, 4.5, 4.5]]), "b": _i([1, 1])},
    ),
    Case(  # batch_indices an input: drawn 0 or 1 per region, as integer inputs are
        "roi_align_computed_batch_indices",
        [op("RoiAlign", ["x", "rois", "b"], output_height=2, output_width=2, sampling_ratio=2)],
        {"x": [2, 2, 6, 6], "b": [4]},
        consts={
            "rois": _f(
                [[0.0, 0.0, 3.0, 4.0], [1.0, 2.0, 5.5, 4.5], [2.5, 1.5, 4.0, 6.0], [0, 0, 6, 6]]
            )
        },
        input_types={"b": INT64},
        opset=16,
    ),
    Case(  # mode max: the largest bilinear term of a bin's samples; two images
        "roi_align_max_16",
        [
            op(
                "RoiAlign",
                ["x", "rois", "b"],
                mode="max",
                output_height=2,
                output_width=3,
                sampling_ratio=2,
            )
        ],
        {"x": [2, 3, 6, 7]},
        consts={
            "rois": _f([[0.5, 1.0, 4.0, 5.0], [2.0, 0.0, 7.5, 6.5], [-2.5, -3.0, 3.0, 2.5]]),
            "b": _i([0, 1, 1]),
        },
        opset=16,
    ),
    Case(  # mode max on regions computed from the data, an image index computed too
        "roi_align_max_computed",
        [
            op("Abs", ["r"], ["a"]),
            op("Mul", ["a", "spread"], ["m"]),
            op("Add", ["m", "base"], ["rois"]),
            op(
                "RoiAlign",
                ["x", "rois", "b"],
                mode="max",
                output_height=3,
                output_width=2,
                sampling_ratio=2,
                coordinate_transformation_mode="output_half_pixel",
            ),
        ],
        {"x": [2, 2, 5, 6], "r": [3, 4], "b": [3]},
        consts={
            "spread": _f([0.5, 0.5, 1.0, 1.0]),
            "base": _f([[0.0, 0.0, 2.0, 2.0], [1.0, 1.5, 4.0, 3.0], [-1.5, 0.0, 2.0, 5.0]]),
        },
        input_types={"b": INT64},
        opset=17,
    ),
    Case(  # opset 13's coordinates; an adaptive ratio (2 × 2 samples a bin for both)
        "roi_align_max_adaptive_13",
        [op("RoiAlign", ["x", "rois", "b"], mode="max", output_height=3, output_width=3)],
        {"x": [1, 2, 6, 6]},
        consts={"rois": _f([[0.0, 1.0, 3.7, 4.2], [1.6, 2.2, 5.5, 5.5]]), "b": _i([0, 0])},
        opset=13,
    ),
    Case(
        "resize_linear_sizes_19",
        [op("Resize", ["x", "", "", "z"], mode="linear")],
        X4,
        consts={"z": _i([1, 4, 10, 14])},
        opset=19,
    ),
]

EINSUM = [
    Case(
        "einsum_scores",
        [op("Einsum", ["q", "k"], equation="bhid,bhjd->bhij")],
        {"q": [1, 2, 5, 8], "k": [1, 2, 6, 8]},
    ),
    Case(
        "einsum_context",
        [op("Einsum", ["p", "v"], equation="bhij,bhjd->bhid")],
        {"p": [1, 2, 5, 6], "v": [1, 2, 6, 8]},
    ),
    Case(
        "einsum_heads_out",
        [op("Einsum", ["p", "v"], equation="bhij,bjhd->bihd")],
        {"p": [1, 2, 5, 6], "v": [1, 6, 2, 8]},
    ),
    Case(
        "einsum_linear_const",
        [op("Einsum", ["x", "w"], equation="bsd,ed->bse")],
        {"x": [2, 3, 8]},
        consts={"w": rng_array([5, 8])},
    ),
    Case(
        "einsum_implicit_sum",
        [op("Einsum", ["x", "z"], equation="ij,jk")],
        {"x": [3, 4], "z": [4, 5]},
    ),
    Case(
        "einsum_outer_summed",
        [op("Einsum", ["x", "z"], equation="ab,cd->ac")],
        {"x": [3, 4], "z": [5, 2]},
    ),
    Case("einsum_one_operand", [op("Einsum", ["x"], equation="abc->cb")], X),
    Case("einsum_transpose", [op("Einsum", ["x"], equation="abc->cab")], X),
]


def _qdq(name: str, scale, zero, opset: int = 13, **attrs) -> Case:
    return Case(
        name,
        [
            op("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
            op("DequantizeLinear", ["q", "s", "z"], **attrs),
        ],
        X4,
        consts={"s": _f(scale), "z": np.asarray(zero)},
        opset=opset,
    )


QUANTIZATION = [
    _qdq("qdq_int8", 0.02, np.int8(3)),
    _qdq("qdq_uint8_19", 0.03, np.uint8(128), opset=19),
    _qdq("qdq_per_channel", [0.02, 0.03, 0.025, 0.04], np.array([0, 1, -2, 5], np.int8), axis=1),
    Case(
        "dequantize_int_input",
        [op("DequantizeLinear", ["q", "s", "z"])],
        {"q": [2, 8]},
        consts={"s": _f(0.1), "z": np.uint8(1)},
        input_types={"q": TensorProto.UINT8},
    ),
]

_W8 = np.random.default_rng(3).integers(-127, 128, (8, 5)).astype(np.int8)


def _weight_qdq(name: str, scale, zero, opset: int = 13, **attrs) -> Case:
    """A weight-only QDQ MatMul: DequantizeLinear of an int8 initializer."""
    return Case(
        name,
        [op("DequantizeLinear", ["w8", "s", "z"], ["w"], **attrs), op("MatMul", ["x", "w"])],
        {"x": [2, 3, 8]},
        consts={
            "w8": _W8 if np.asarray(zero).dtype == np.int8 else _W8.view(np.uint8),
            "s": _f(scale),
            "z": np.asarray(zero),
        },
        opset=opset,
    )


WEIGHT_QDQ = [
    _weight_qdq("weight_qdq_per_tensor", 0.01, np.int8(0)),
    _weight_qdq("weight_qdq_uint8_19", 0.01, np.uint8(128), opset=19),
    _weight_qdq(
        "weight_qdq_per_column",
        [0.01, 0.02, 0.005, 0.01, 0.03],
        np.array([0, 1, -1, 2, 0], np.int8),
        axis=1,
    ),
]
QUANTIZATION += WEIGHT_QDQ

FOLDED = [
    Case(  # a mask's positions, known at import, picking columns of the data
        "nonzero_folds",
        [
            op("NonZero", ["mask"], ["nz"]),
            op("Squeeze", ["nz", "zero_axis"], ["idx"]),
            op("Gather", ["x", "idx"], axis=1),
        ],
        {"x": [2, 8]},
        consts={"mask": np.array([1, 0, 1, 1, 0, 0, 1, 0], bool), "zero_axis": _i([0])},
    ),
    Case(
        "compress_folds",
        [op("Compress", ["table", "keep"], ["rows"], axis=0), op("MatMul", ["x", "rows"])],
        {"x": [2, 3]},
        consts={"table": rng_array([5, 4]), "keep": np.array([1, 0, 1, 1, 0], bool)},
    ),
]

FAMILIES = [
    "MATH",
    "LOGIC",
    "INDEXING",
    "REDUCTIONS",
    "SPATIAL",
    "EINSUM",
    "QUANTIZATION",
    "FOLDED",
]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_newly_lowered_op_matches_onnxruntime(family, tmp_path):
    run_all(globals()[family], tmp_path)


def test_a_weight_only_qdq_stays_compressed(tmp_path):
    """The int8 weight is in the program as it is in the model, under constexpr_affine_dequantize:
    not evaluated into fp16 at import."""
    from onnx_support import save

    from app.language.targets import get_target
    from app.onnx.files import ModelFiles
    from app.onnx.importer import import_onnx
    from app.request import OnnxParams

    for case in WEIGHT_QDQ:
        path = save(case, tmp_path)
        build = import_onnx(
            OnnxParams(model=path.name),
            ModelFiles.in_folder(path),
            target=get_target("ios18"),
            name="q",
        )
        ops = [o.type for o in build.program.main.operations if o.type != "const"]
        assert ops == ["constexpr_affine_dequantize", "matmul"], (case.name, ops)
        stored = [
            o.value.stored()
            for o in build.program.main.operations
            if o.type == "const" and o.name.endswith("quantized_data")
        ]
        assert len(stored) == 1 and np.array_equal(stored[0], case.consts["w8"])


def test_ops_whose_shape_follows_the_data_are_refused_naming_every_node(tmp_path):
    """NonZero, Compress and Range on values the program computes: one refusal naming each,
    with the reason (their output's shape depends on the data), and an op that waits named with
    its primitive."""
    from onnx_support import check

    from app.errors import RequestError

    case = Case(
        "data_shapes",
        [
            op("NonZero", ["x"], ["nz"]),
            op("Greater", ["x", "zero"], ["pos"]),
            op("Compress", ["x", "pos"], ["c"], axis=1),
            op("PRelu", ["x", "slope"], ["y"]),  # a slope computed from the data
        ],
        {"x": [2, 8], "slope": [8]},
        ["y", "nz", "c"],
        consts={"zero": _f(0.0)},
        output_types={"nz": INT64},
    )
    with pytest.raises(RequestError) as caught:
        check(case, tmp_path)
    reasons = {u["op_type"]: u["reason"] for u in caught.value.extra["unsupported"]}
    assert set(reasons) == {"NonZero", "Compress", "PRelu"}, reasons
    assert "its output's shape depends on the data" in reasons["NonZero"]
    assert "its output's shape depends on the data" in reasons["Compress"]
    assert reasons["PRelu"] == "waits on the MIL primitive prelu (a slope computed from the data)"


def test_mod_refuses_the_fmod_values_it_does_not_lower_naming_each_node(tmp_path):
    """fmod=0 on floats (ONNX defines it for integers) and an fmod other than 0 and 1."""
    from onnx_support import check

    from app.errors import RequestError

    case = Case(
        "mod_bad",
        [op("Mod", ["x", "z"], ["a"]), op("Mod", ["x", "z"], ["y"], fmod=2)],
        {"x": [2, 8], "z": [2, 8]},
        ["y", "a"],
    )
    with pytest.raises(RequestError) as caught:
        check(case, tmp_path)
    reasons = {u["node"]: u["reason"] for u in caught.value.extra["unsupported"]}
    assert reasons == {
        "/Mod_a": "Mod of floats with fmod = 0 (ONNX requires fmod = 1 for floats)",
        "/Mod_y": "Mod with fmod = 2 (ONNX defines 0 and 1)",
    }, reasons


def test_grid_sample_refuses_cubic_and_volumes_naming_each_node(tmp_path):
    from onnx_support import check

    from app.errors import RequestError

    case = Case(
        "grid_sample_bad",
        [
            op("GridSample", ["x", "grid"], ["y"], mode="cubic"),
            op("GridSample", ["v", "grid3"], ["z"]),
        ],
        {"x": [1, 2, 3, 4], "grid": [1, 3, 4, 2], "v": [1, 2, 3, 4, 5], "grid3": [1, 2, 3, 4, 3]},
        ["y", "z"],
        opset=20,
    )
    with pytest.raises(RequestError) as caught:
        check(case, tmp_path)
    reasons = {u["node"]: u["reason"] for u in caught.value.extra["unsupported"]}
    assert reasons == {
        "/GridSample_y": "GridSample mode 'cubic' (MIL's resample: linear and nearest)",
        "/GridSample_z": "GridSample of a rank-5 input (MIL's resample is 2-D)",
    }, reasons


def test_roi_align_refuses_what_it_does_not_lower_naming_each_node(tmp_path):
    """An adaptive sampling ratio on computed regions, or over regions of different sample
    counts, and a coordinate mode ONNX does not define: each refused naming its node."""
    from onnx_support import check

    from app.errors import RequestError

    rois = {
        "rois": _f([[0.0, 0.0, 2.0, 3.0]]),
        "wide": _f([[0.0, 0.0, 2.0, 3.0], [0.0, 0.0, 6.0, 3.0]]),
        "b": _i([0]),
        "b2": _i([0, 0]),
    }
    case = Case(
        "roi_align_bad",
        [
            op("RoiAlign", ["x", "r", "b"], ["y"]),
            op("RoiAlign", ["x", "wide", "b2"], ["y2"], mode="max"),
            op("RoiAlign", ["x", "rois", "b"], ["y3"], coordinate_transformation_mode="corner"),
        ],
        {"x": [1, 2, 5, 5], "r": [1, 4]},
        ["y", "y2", "y3"],
        consts=rois,
    )
    with pytest.raises(RequestError) as caught:
        check(case, tmp_path)
    reasons = {u["node"]: u["reason"] for u in caught.value.extra["unsupported"]}
    assert set(reasons) == {"/RoiAlign_y", "/RoiAlign_y2", "/RoiAlign_y3"}, reasons
    assert reasons["/RoiAlign_y"].startswith("RoiAlign with sampling_ratio 0 (a sample count")
    assert reasons["/RoiAlign_y2"] == (
        "RoiAlign with sampling_ratio 0 over regions of different sample counts "
        "[(2, 3), (6, 3)] (one pool window for all)"
    )
    assert reasons["/RoiAlign_y3"] == "RoiAlign coordinate_transformation_mode 'corner'"


@pytest.mark.parametrize(
    ("attrs", "indices", "message"),
    [
        ({"mode": "min"}, [0], "mode 'min' (ONNX defines avg and max)"),
        ({}, [2], "batch_indices [2] for 1 regions of 2 images"),
        ({}, [0, 1], "batch_indices [0, 1] for 1 regions of 2 images"),
    ],
    ids=["mode", "index-beyond-the-images", "one-index-too-many"],
)
def test_roi_align_bad_attributes_and_indices_are_4xx_naming_the_node(
    tmp_path, capsys, attrs, indices, message
):
    """Refused as the request's fault (exit 2 on the command line), naming node and reason."""
    from onnx_support import check, save

    from app.cli import main
    from app.errors import RequestError

    case = Case(
        "roi_align_invalid",
        [op("RoiAlign", ["x", "rois", "b"], sampling_ratio=1, **attrs)],
        {"x": [2, 2, 5, 5]},
        consts={"rois": _f([[0.0, 0.0, 2.0, 3.0]]), "b": _i(indices)},
    )
    with pytest.raises(RequestError) as caught:
        check(case, tmp_path)
    assert caught.value.field == "nodes./RoiAlign_y" and "'/RoiAlign_y'" in caught.value.message
    assert message in caught.value.message
    out = tmp_path / "out.zip"
    assert main(["onnx", str(save(case, tmp_path)), "-o", str(out), "--format", "mil"]) == 2
    err = capsys.readouterr().err
    assert "nodes./RoiAlign_y" in err and message in err and not out.exists()


def test_a_constant_slice_normalizes_to_zeros_as_onnx_defines_it(tmp_path):
    """MeanVarianceNormalization's function divides by σ + 1e-9: a constant slice gives zeros
    (onnxruntime's kernel gives NaN there, so the verification above cannot hold this)."""
    from onnx_support import save

    from app.language.targets import get_target
    from app.onnx.files import ModelFiles
    from app.onnx.importer import import_onnx
    from app.reference import Executor
    from app.request import OnnxParams

    case = Case("mvn", [op("MeanVarianceNormalization", ["x"])], {"x": [1, 2, 2, 2]})
    path = save(case, tmp_path)
    build = import_onnx(
        OnnxParams(model=path.name),
        ModelFiles.in_folder(path),
        target=get_target("ios18"),
        name="m",
    )
    for value in (0.0, 3.0):
        got = Executor(build.program).run({"x": np.full((1, 2, 2, 2), value, np.float16)})
        assert np.array_equal(got.outputs["y"], np.zeros((1, 2, 2, 2))), got.outputs["y"]
