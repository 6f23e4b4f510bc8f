"""The ONNX ops lowered onto the primitives added as records after the importer's first phase:
each in small graphs written with onnx.helper, verified against onnxruntime (CPU, float32), at
two opsets where the op's spelling changed. Batched per family as tests/test_onnx_ops.py is."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx_support import Case, one, op, run_all

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


@pytest.mark.parametrize("family", ["MATH", "LOGIC"])
def test_every_newly_lowered_op_matches_onnxruntime(family, tmp_path):
    run_all(globals()[family], tmp_path)
