"""One small graph per use of each primitive the graph passes and the ONNX importer read: what
tests/test_primitives.py builds, verifies, round-trips, checks against coremltools' own value
inference and runs on Apple's Core AI runtime.

A case is a graph request (inputs, nodes, outputs) with its weights as NumPy arrays, the node
whose op it tries (`node`, the last one unless said), and what checks apply: `coremltools` when
coremltools' op definition computes a value (its `value_inference`) the result is compared with,
`coreai` unless the form has no Core AI translation (it is then refused by name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

SHAPE = [2, 3, 4, 6]  # [N, C, H, W]
RNG = np.random.default_rng(7)


@dataclass(frozen=True)
class Case:
    id: str
    graph: dict[str, Any]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    coremltools: bool = True  # coremltools' definition computes a value to compare with
    coreai: bool = True  # has a Core AI translation

    @property
    def op(self) -> str:
        return self.graph["nodes"][-1]["op"].removeprefix("mil.")


def _normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def case(
    id: str,
    op: str,
    params: dict | None = None,
    inputs: dict | None = None,
    *,
    before: list[dict] | None = None,
    graph_inputs: dict | None = None,
    weights: dict[str, np.ndarray] | None = None,
    outputs: dict | None = None,
    **flags: bool,
) -> Case:
    """A graph whose last node (`id`) applies `op`, after the nodes `before`; a weight named
    without a node is the last node's."""
    node = {"id": id, "op": op, "params": params or {}, "inputs": inputs or {"x": "a"}}
    graph = {
        "inputs": graph_inputs or {"a": {"shape": SHAPE}},
        "nodes": [*(before or []), node],
        "outputs": outputs or {"y": id},
    }
    named = {k if "." in k else f"{id}.{k}": v for k, v in (weights or {}).items()}
    return Case(id, graph, named, **flags)


def _abs(id: str = "m") -> dict:
    return {"id": id, "op": "abs", "inputs": {"x": "a"}}


def _tanh(id: str = "t") -> dict:
    """tanh(a): inside asin's and acos's domain."""
    return {"id": id, "op": "tanh", "inputs": {"x": "a"}}


A_B = {"a": {"shape": SHAPE}, "b": {"shape": [1, 3, 1, 6]}}
INTS = {"i": {"shape": [2, 5], "dtype": "int32"}}
_COMPARE = {"x": "a", "y": "b"}


def _compare(id: str, op: str) -> Case:
    return case(id, op, inputs=_COMPARE, graph_inputs=A_B)


def _logical(id: str, op: str) -> Case:
    before = [
        {"id": "gt", "op": "greater", "inputs": _COMPARE},
        {"id": "lt", "op": "less", "inputs": {"x": "a", "y": "half"}},
    ]
    return case(
        id,
        op,
        inputs={"x": "gt", "y": "lt"},
        before=[{"id": "half", "op": "abs", "inputs": {"x": "b"}}, *before],
        graph_inputs=A_B,
    )


def _scale(values) -> np.ndarray:
    return np.asarray(values, np.float32)


ELEMENTWISE = [
    case(
        "pw",
        "pow",
        inputs={"x": "m"},
        before=[_abs()],
        weights={"y": _scale([0.5, 2.0, 3.0]).reshape(1, 3, 1, 1)},
    ),
    case("ef", "erf"),
    case("lg", "log", {"epsilon": 1e-3}, {"x": "m"}, before=[_abs()]),
    case("iv", "inverse", inputs={"x": "m"}, before=[_abs()]),
    case("sn", "sin"),
    case("cs", "cos"),
    case("at", "atan"),
    case("as_", "asin", inputs={"x": "t"}, before=[_tanh()]),
    case("ac", "acos", inputs={"x": "t"}, before=[_tanh()]),
    case(
        "fd",
        "floor_div",
        inputs={"x": "a", "y": "d"},
        before=[_abs(), {"id": "d", "op": "add", "inputs": {"x": "m"}}],
        weights={"d.y": _scale(0.5)},
    ),
    case(
        "fdi",
        "floor_div",
        inputs={"x": "i"},
        graph_inputs=INTS,
        weights={"y": np.array([3, -2, 4, -5, 2], np.int32)},
    ),
    case("fl", "floor"),
    case("cl", "ceil"),
    case("rd", "round"),
    case("sg", "sign"),
    case("cp", "clip", {"alpha": -0.5, "beta": 0.7}),
    case(
        "eq",
        "equal",
        inputs={"x": "ra", "y": "rb"},
        before=[
            {"id": "ra", "op": "round", "inputs": {"x": "a"}},
            {"id": "rb", "op": "round", "inputs": {"x": "b"}},
        ],
        graph_inputs=A_B,
    ),
    _compare("ne", "not_equal"),
    _compare("gt_", "greater"),
    _compare("ge", "greater_equal"),
    _compare("lt_", "less"),
    _compare("le", "less_equal"),
    _logical("la", "logical_and"),
    _logical("lo", "logical_or"),
    _logical("lx", "logical_xor"),
    case(
        "ln",
        "logical_not",
        inputs={"x": "gt"},
        before=[{"id": "gt", "op": "greater", "inputs": _COMPARE}],
        graph_inputs=A_B,
    ),
    case(
        "se",
        "select",
        inputs={"cond": "gt", "a": "a", "b": "b"},
        before=[{"id": "gt", "op": "greater", "inputs": _COMPARE}],
        graph_inputs=A_B,
    ),
    case(
        "dq",
        "dequantize",
        {"scale": 0.05},
        {"input": "q"},
        before=[
            {
                "id": "q",
                "op": "quantize",
                "params": {"output_dtype": "int8", "scale": 0.05},
                "inputs": {"input": "a"},
            }
        ],
        coremltools=False,  # coremltools computes no dequantize; a quantize is checked below
    ),
    case(
        "dqa",
        "dequantize",
        {"axis": 1},
        {"input": "q"},
        before=[
            {
                "id": "q",
                "op": "quantize",
                "params": {"output_dtype": "uint8", "axis": 1},
                "inputs": {"input": "a"},
            }
        ],
        weights={
            "scale": _scale([0.05, 0.1, 0.02]),
            "zero_point": np.array([1, 0, 128], np.uint8),
            "q.scale": _scale([0.05, 0.1, 0.02]),
            "q.zero_point": np.array([1, 0, 128], np.uint8),
        },
        coremltools=False,
    ),
    case(  # iOS17's reshape of the integers themselves (int_op_canonicalization writes it)
        "rq",
        "reshape",
        {"shape": [2, 3, 24]},
        {"x": "q"},
        before=[
            {
                "id": "q",
                "op": "quantize",
                "params": {"output_dtype": "int8", "scale": 0.05},
                "inputs": {"input": "a"},
            }
        ],
    ),
    case(
        "qa",
        "quantize",
        {"output_dtype": "uint8", "axis": 1},
        {"input": "a"},
        weights={"scale": _scale([0.05, 0.1, 0.02]), "zero_point": np.array([1, 0, 128], np.uint8)},
    ),
]

ACTIVATION = [
    case("lr", "leaky_relu", {"alpha": 0.1}),
    case("pr", "prelu", weights={"alpha": _scale([0.1, -0.2, 0.3])}),
    case("el", "elu", {"alpha": 1.5}),
    case(
        "sp", "softplus", inputs={"x": "s"}, before=[{"id": "s", "op": "exp", "inputs": {"x": "a"}}]
    ),
    case("sh", "sigmoid_hard", {"alpha": 0.2, "beta": 0.5}),
]

NORMALIZATION = [
    case(
        "lnm",
        "layer_norm",
        {"axes": [-1], "epsilon": 1e-5},
        weights={"gamma": _normal(6), "beta": _normal(6)},
    ),
    case("lnd", "layer_norm", {"axes": [1, 3]}),
    case(
        "inm", "instance_norm", weights={"gamma": _normal(3), "beta": _normal(3)}, coremltools=False
    ),
    case(
        "bnm",
        "batch_norm",
        weights={
            "mean": _normal(3),
            "variance": _scale([0.5, 1.0, 2.0]),
            "gamma": _normal(3),
            "beta": _normal(3),
        },
        coremltools=False,
    ),
]

REDUCTION = [
    case("rmn", "reduce_min", {"axes": [1, 3]}),
    case("rpd", "reduce_prod", {"axes": [1]}),
    case("amx", "reduce_argmax", {"axis": 2}),
    case("amn", "reduce_argmin", {"axis": -1, "keep_dims": True}),
    case("csm", "cumsum", {"axis": 2}),
    # coremltools' cumsum computes no exclusive sum (np.zeros(shape, data): a TypeError)
    case("csr", "cumsum", {"axis": -1, "exclusive": True, "reverse": True}, coremltools=False),
    case("tpk", "topk", {"k": 2, "axis": 2}, outputs={"values": "tpk.0", "indices": "tpk.1"}),
    case("tpa", "topk", {"k": 3, "ascending": True, "return_indices": False}),
    case(
        "mxp",
        "max_pool",
        {"kernel_sizes": [2, 2], "strides": [2, 2], "pad_type": "valid"},
        coremltools=False,
    ),
    case(
        "mxc",
        "max_pool",
        {
            "kernel_sizes": [3, 3],
            "strides": [2, 2],
            "pad_type": "custom",
            "pad": [1, 1, 1, 1],
            "ceil_mode": True,
        },
        coremltools=False,
    ),
    case(
        "avs",
        "avg_pool",
        {"kernel_sizes": [3, 2], "strides": [1, 2], "pad_type": "same"},
        coremltools=False,
    ),
    case(
        "ave",
        "avg_pool",
        {
            "kernel_sizes": [3, 3],
            "strides": [2, 2],
            "pad_type": "custom",
            "pad": [1, 1, 1, 1],
            "exclude_padding_from_average": True,
            "ceil_mode": True,
        },
        coremltools=False,
    ),
]

LINEAR = [
    case(
        "ctc",
        "conv_transpose",
        {"strides": [2, 2], "pad_type": "custom", "pad": [1, 0, 0, 1]},
        weights={"weight": _normal(3, 2, 3, 3, scale=0.3)},
        coremltools=False,
    ),
    case(
        "cts",
        "conv_transpose",
        {"strides": [2, 1], "pad_type": "same"},
        weights={"weight": _normal(3, 4, 2, 2, scale=0.3), "bias": _normal(4)},
        coremltools=False,
    ),
    case(
        "ctg",
        "conv_transpose",
        {"strides": [2, 2], "output_shape": [2, 3, 10, 14], "groups": 3},
        weights={"weight": _normal(3, 1, 3, 2, scale=0.3)},
        coremltools=False,
    ),
    case(
        "lin",
        "linear",
        graph_inputs={"a": {"shape": [2, 4, 6]}},
        weights={"weight": _normal(5, 6, scale=0.4), "bias": _normal(5)},
    ),
    case(
        "es4",
        "einsum",
        {"equation": "nchw,nwhu->nchu"},
        {"values": ["a", "bt"]},
        before=[
            {"id": "bt", "op": "transpose", "params": {"perm": [0, 3, 2, 1]}, "inputs": {"x": "a"}}
        ],
    ),
    case(
        "es3",
        "einsum",
        {"equation": "abc,cbd->abd"},
        {"values": ["a", "b"]},
        graph_inputs={"a": {"shape": [3, 4, 5]}, "b": {"shape": [5, 1, 2]}},
    ),
]

_INDICES = np.array([[1, 0, 3], [2, 2, 1]], np.int32)


def _resample(id: str, **params) -> Case:
    """x [2, 3, 4, 6] read at [2, 5, 3] points: standard normal ones, many beyond [-1, 1]."""
    return case(
        id,
        "resample",
        {"padding_value": 0.5, "coordinates_mode": "normalized_minus_one_to_one", **params},
        {"x": "a", "coordinates": "g"},
        graph_inputs={"a": {"shape": SHAPE}, "g": {"shape": [2, 5, 3, 2]}},
        coremltools=False,  # coremltools computes no resample
    )


LAYOUT = [
    *(
        _resample(id, sampling_mode=m, padding_mode=p, align_corners=align)
        for id, m, p, align in (
            ("rsc", "bilinear", "constant", False),
            ("rsb", "bilinear", "border", True),
            ("rsr", "bilinear", "reflection", True),
            ("rss", "nearest", "symmetric", False),
        )
    ),
    _resample(
        "rsu",
        sampling_mode="bilinear",
        padding_mode="symmetric",
        align_corners=False,
        coordinates_mode="unnormalized",
    ),
    case("stk", "stack", {"axis": 2}, {"values": ["a", "a", "a"]}),
    case(
        "idn",
        "mil.identity",
        inputs={"x": "r"},
        before=[{"id": "r", "op": "relu", "inputs": {"x": "a"}}],
    ),
    case("gth", "gather", {"axis": 2}, weights={"indices": _INDICES}),
    case(
        "gtn",
        "gather",
        {"axis": 1},
        {"x": "a", "indices": "i"},
        graph_inputs={"a": {"shape": [2, 9, 3]}, "i": {"shape": [4], "dtype": "int32"}},
        coremltools=False,
    ),
    case(
        "gtb",
        "gather",
        {"axis": 3, "batch_dims": 1},
        weights={"indices": np.array([[5, 0], [1, 1]], np.int32)},
        coreai=False,
    ),
    case(
        "gaa",
        "gather_along_axis",
        {"axis": 2},
        weights={"indices": RNG.integers(0, 4, (2, 3, 3, 6)).astype(np.int32)},
    ),
    case(
        "gnd",
        "gather_nd",
        weights={"indices": np.array([[0, 1], [1, 2], [1, 0]], np.int32)},
        coremltools=False,
    ),
    case(
        "gnb",
        "gather_nd",
        {"batch_dims": 1},
        weights={"indices": np.array([[[2], [0]], [[1], [1]]], np.int32)},
        coremltools=False,
        coreai=False,
    ),
    case(
        "sca",
        "scatter_along_axis",
        {"axis": 2, "mode": "add"},
        {"data": "a", "updates": "u"},
        before=[
            {
                "id": "u",
                "op": "slice_by_size",
                "params": {"begin": [0, 0, 0, 0], "size": [2, 3, 3, 6]},
                "inputs": {"x": "a"},
            }
        ],
        weights={"indices": RNG.integers(0, 4, (2, 3, 3, 6)).astype(np.int32)},
        coremltools=False,  # coremltools computes every mode as "update"
    ),
    case(
        "scu",
        "scatter_along_axis",
        {"axis": 1, "mode": "update"},
        {"data": "a", "updates": "u"},
        before=[
            {
                "id": "u",
                "op": "slice_by_size",
                "params": {"begin": [0, 0, 0, 0], "size": [2, 1, 4, 6]},
                "inputs": {"x": "a"},
            }
        ],
        weights={"indices": np.full((2, 1, 4, 6), 2, np.int32)},
    ),
    case(  # rows (n, c) of a [2, 3, 4, 6]: updates [3, 4, 6]
        "snu",
        "scatter_nd",
        {"mode": "update"},
        {"data": "a", "updates": "uu"},
        before=[
            {
                "id": "u",
                "op": "slice_by_size",
                "params": {"begin": [1, 0, 0, 0], "size": [1, 3, 4, 6]},
                "inputs": {"x": "a"},
            },
            {"id": "uu", "op": "reshape", "params": {"shape": [3, 4, 6]}, "inputs": {"x": "u"}},
        ],
        weights={"indices": np.array([[0, 2], [1, 0], [0, 1]], np.int32)},
        coremltools=False,  # coremltools computes no scatter_nd
    ),
    case(  # whole images, one of them twice: its updates add up
        "sna",
        "scatter_nd",
        {"mode": "add"},
        {"data": "a", "updates": "a"},
        weights={"indices": np.array([[1], [1]], np.int32)},
        coremltools=False,
        coreai=False,  # Core AI's scatter_nd only writes
    ),
    case(
        "oh",
        "one_hot",
        {"one_hot_vector_size": 4, "axis": 1, "on_value": 2.0, "off_value": -1.0},
        {"indices": "i"},
        graph_inputs=INTS,
        outputs={"y": "oh"},
        coremltools=False,
    ),
    case(
        "ohi",
        "one_hot",
        {"one_hot_vector_size": 3},
        {"indices": "i"},
        graph_inputs=INTS,
        coremltools=False,
    ),
    case("bdp", "band_part", {"lower": 1, "upper": 0}),
    case("pdc", "pad", {"pad": [1, 2, 0, 3], "constant_val": 0.5}),
    case("pdr", "pad", {"pad": [1, 2, 3, 1], "mode": "reflect"}),
    case("pde", "pad", {"pad": [0, 2], "mode": "replicate"}),
    case(
        "pxs",
        "pixel_shuffle",
        {"upscale_factor": 2},
        inputs={"x": "t"},
        before=[{"id": "t", "op": "tile", "params": {"reps": [1, 4, 1, 1]}, "inputs": {"x": "a"}}],
        coremltools=False,
    ),
    case(
        "d2s",
        "depth_to_space",
        {"block_size": 2},
        inputs={"x": "t"},
        before=[{"id": "t", "op": "tile", "params": {"reps": [1, 4, 1, 1]}, "inputs": {"x": "a"}}],
        coremltools=False,
    ),
    case("s2d", "space_to_depth", {"block_size": 2}, coremltools=False),
    case(
        "b2s",
        "batch_to_space",
        {"block_shape": [2, 1], "crops": [[1, 0], [0, 2]]},
        coremltools=False,
    ),
    case(
        "unn",
        "upsample_nearest_neighbor",
        {"scale_factor_height": 2, "scale_factor_width": 3},
        coremltools=False,
    ),
    case(
        "ubl",
        "upsample_bilinear",
        {"scale_factor_height": 2, "scale_factor_width": 2},
        coremltools=False,
    ),
    case(
        "ubh",
        "upsample_bilinear",
        {"scale_factor_height": 1.5, "scale_factor_width": 2.0, "align_corners": False},
        coremltools=False,
    ),
]

CASES: list[Case] = [*ELEMENTWISE, *ACTIVATION, *NORMALIZATION, *REDUCTION, *LINEAR, *LAYOUT]
