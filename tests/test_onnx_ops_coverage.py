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


@pytest.mark.parametrize("family", ["MATH", "LOGIC", "INDEXING"])
def test_every_newly_lowered_op_matches_onnxruntime(family, tmp_path):
    run_all(globals()[family], tmp_path)
