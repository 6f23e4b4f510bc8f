"""The seed's before/after examples (../shared/seeds/003, coremltools' catalogue of MIL graph
passes), each rewritten as a graph request with chosen values: the pass alone gives exactly the
op types, in order, of the example's after-program, and the program computes what it computed
before (the reference executor, within the graph's fp16 tolerance), alone and in the default
pipeline. Beside each example, the cases at its edges that must NOT change: a shared
intermediate, a broadcast that changes the meaning, an operand that is not a constant, a
constant, axis or epsilon that differs.

The seed's ops the IR lacks are replaced by ones it has (linear by matmul + add, log by exp,
pool by a reduce_mean over the spatial axes, pow(x, 3) by x·square(x)); examples a graph request
cannot hold (a dead node, repeated names) are built on the IR directly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from app.mil import Builder, DType
from app.passes import DEFAULT, parse_passes, resolve, run_pipeline
from app.reference.executor import Executor, random_inputs
from tests.graph_passes import assert_agrees, build, changed_by, graph, kinds, node, values

X = ([1, 4, 2, 3], "fp16")  # the default input
C = 4  # its channels


@dataclass
class Case:
    id: str
    graph_pass: str
    body: dict
    weights: dict
    after: list[str]  # op types (consts left out) after the pass alone
    fires: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    # passes run first, to make what a graph request cannot write (a constexpr)
    prelude: tuple[str, ...] = ()


def _conv(id: str, x: str = "x", cout: int = C) -> tuple[dict, dict]:
    return node(id, "mil.conv", {"x": x}), {f"{id}.weight": values(cout, C, 1, 1)}


def _one(body_nodes, out, weights, **inputs):
    return graph(body_nodes, {"y": out}, **inputs), weights


# -- cleanup ------------------------------------------------------------------------------------
def _dedup(bias_size: int, same: bool = True) -> tuple[dict, dict]:
    """The seed's q/k projections: the same weight and bias twice (linear as matmul + add)."""
    w, b = values(16, bias_size), values(bias_size)
    nodes = [
        node("q_proj", "mil.matmul", {"x": "q"}),
        node("q_embedding", "add", {"x": "q_proj"}),
        node("k_proj", "mil.matmul", {"x": "k"}),
        node("k_embedding", "add", {"x": "k_proj"}),
    ]
    body = graph(
        nodes, {"qe": "q_embedding", "ke": "k_embedding"}, q=([8, 16], "fp16"), k=([8, 16], "fp16")
    )
    weights = {
        "q_proj.y": w,
        "q_embedding.y": b,
        "k_proj.y": w if same else w + 1,
        "k_embedding.y": b if same else b + 1,
    }
    return body, weights


def _folded(constant_input: bool) -> tuple[dict, dict]:
    """%2 = op(consts) read by %4 = other_op(%2, %3): %2 becomes a const (in fp32: a graph's
    const with no tensor beside it is stored in fp32)."""
    first = node("c", "exp", {} if constant_input else {"x": "x"})
    weights = {"c.x": values(1, C, 1, 1)} if constant_input else {}
    nodes = [first, node("y", "mul", {"x": "x", "y": "c"})]
    return graph(nodes, {"out": "y"}, x=([1, C, 2, 3], "fp32")), weights


def _reduce_mean(constant: float, *, div: bool = False, shared: bool = False) -> tuple[dict, dict]:
    nodes = [
        node("s", "reduce_sum", {"x": "x"}, axes=[1], keep_dims=True),
        node("m", "real_div" if div else "mul", {"x": "s"}),
    ]
    outputs = {"y": "m"}
    if shared:
        outputs["total"] = "s"
    return graph(nodes, outputs), {"m.y": np.array([constant], np.float32)}


def _noop(kind: str) -> tuple[dict, dict]:
    """The seed's reshape to the same shape before an add; and ops that do nothing or almost."""
    shaped = {
        "reshape": node("r", "reshape", {"x": "x"}, shape=[1, 4, 2, 3]),
        "reshape_other": node("r", "reshape", {"x": "x"}, shape=[1, 4, 3, 2]),
        "add_zero": node("r", "add", {"x": "x"}),
        "mul_one": node("r", "mul", {"x": "x"}),
        "add_zero_broadcast": node("r", "add", {"x": "x"}),
        "add_small": node("r", "add", {"x": "x"}),
        "transpose_identity": node("r", "transpose", {"x": "x"}, perm=[0, 1, 2, 3]),
        # which ops hand on their input is read from their meanings: these edges of it
        "mul_one_left": node("r", "mul", {"y": "x"}),
        "sub_from_zero": node("r", "sub", {"y": "x"}),
        "max_lowest": node("r", "maximum", {"x": "x"}),  # leaves all but -inf as they are
        "sum_one": node("r", "reduce_sum", {"x": "x"}, axes=[0], keep_dims=True),
        "l2_one": node("r", "reduce_l2_norm", {"x": "x"}, axes=[0], keep_dims=True),  # |x|
        "concat_one": {
            "id": "r",
            "op": "concat",
            "inputs": {"values": ["x"]},
            "params": {"axis": 1},
        },
    }[kind]
    constant = {
        "add_zero": np.zeros((1, C, 1, 1), np.float32),
        "mul_one": np.ones((1,), np.float32),
        "add_zero_broadcast": np.zeros((2, C, 2, 3), np.float32),  # broadcasts x to batch 2
        "add_small": np.full((1,), 1e-3, np.float32),
        "mul_one_left": np.ones((1,), np.float32),
        "sub_from_zero": np.zeros((1,), np.float32),
        "max_lowest": np.full((1,), -65504, np.float32),
    }.get(kind)
    operand = "r.x" if kind in ("mul_one_left", "sub_from_zero") else "r.y"
    weights = {operand: constant} if constant is not None else {}
    nodes = [shaped, node("y", "add", {"x": "r"})]
    weights["y.y"] = values(1)
    return graph(nodes, {"out": "y"}), weights


def _redundant(same_constant: bool = True, swapped: bool = False) -> tuple[dict, dict]:
    """The seed's op2 and op3 of one type reading %1, %0 and a const of the same value."""
    nodes = [
        node("op0", "relu", {"x": "x"}),
        node("op1", "sigmoid", {"x": "x"}),
        node("op2", "sub", {"x": "op1", "y": "op0"}),
        node("op3", "sub", {"x": "op0" if swapped else "op1", "y": "op1" if swapped else "op0"}),
        node("a", "add", {"x": "op2"}),
        node("b", "add", {"x": "op3"}),
        node("y", "mul", {"x": "a", "y": "b"}),
    ]
    four_and_a_half = np.array([4.5], np.float32)
    weights = {
        "a.y": four_and_a_half,
        "b.y": four_and_a_half if same_constant else four_and_a_half * 2,
    }
    return graph(nodes, {"out": "y"}), weights


# -- activations ----------------------------------------------------------------------------------
def _gelu_tanh(
    pattern: int, cubic: float = 0.044715, shared: bool = False, power: float | None = None
) -> tuple[dict, dict]:
    """y = x·(0.5·(tanh(√(2/π)·(x + 0.044715·x³)) + 1)) (pattern 1), or (0.5·x)·(...)
    (pattern 2); x³ as x·square(x), or as pow(x, power) when given."""
    nodes = [
        node("sq", "square", {"x": "x"}),
        node("cube", "mul", {"x": "x", "y": "sq"}),
        node("cubic", "mul", {"x": "cube"}),
        node("inner", "add", {"x": "x", "y": "cubic"}),
        node("scaled", "mul", {"x": "inner"}),
        node("t", "tanh", {"x": "scaled"}),
        node("one_plus", "add", {"x": "t"}),
    ]
    if pattern == 1:
        nodes += [node("half", "mul", {"x": "one_plus"}), node("y", "mul", {"x": "x", "y": "half"})]
    else:
        nodes += [node("half", "mul", {"x": "x"}), node("y", "mul", {"x": "half", "y": "one_plus"})]
    weights = {
        "cubic.y": np.array([cubic], np.float32),
        "scaled.y": np.array([math.sqrt(2 / math.pi)], np.float32),
        "one_plus.y": np.array([1.0], np.float32),
        "half.y": np.array([0.5], np.float32),
    }
    if power is not None:
        nodes[:2] = [node("cube", "pow", {"x": "x"})]
        weights["cube.y"] = np.array([power], np.float32)
    outputs = {"out": "y", **({"tanh": "t"} if shared else {})}
    return graph(nodes, outputs), weights


# -- convolutions ---------------------------------------------------------------------------------
def _conv_then(
    op: str, constant: np.ndarray | None, *, transpose: bool = False, shared: bool = False
):
    conv, weights = _conv("c")
    nodes = [conv]
    source = "c"
    if transpose:
        nodes.append(node("t", "transpose", {"x": "c"}, perm=[0, 2, 3, 1]))
        source = "t"
    inputs = {"x": source} if constant is not None else {"x": source, "y": "x2"}
    nodes.append(node("y", op, inputs))
    outputs = {"out": "y", **({"conv": "c"} if shared else {})}
    extra = (
        {"x2": ([1, 2, 3, C] if transpose else [1, C, 2, 3], "fp16")} if constant is None else {}
    )
    body = graph(nodes, outputs, x=X, **extra)
    if constant is not None:
        weights["y.y"] = constant
    return body, weights


def _quantized_conv_scale() -> tuple[dict, dict]:
    """A conv node of the catalog with a palettized weight (a constexpr): never folded into."""
    nodes = [
        {
            "id": "c",
            "op": "conv",
            "params": {"out_channels": 16},
            "inputs": {"x": "x"},
            "quantize": {"mode": "palettize", "nbits": 4},
        },
        node("y", "mul", {"x": "c"}),
    ]
    body = graph(nodes, {"out": "y"}, x=([1, 16, 1, 8], "fp16"))
    return body, {"c.weight": values(16, 16), "y.y": values(1, 16, 1, 1)}


# -- linear and elementwise --------------------------------------------------------------------
def _transposed_matmul(perm: list[int], shared: bool = False) -> tuple[dict, dict]:
    rank = len(perm)
    shape = [2, 5, 3][:rank] if rank == 3 else [5, 3]
    nodes = [
        node("tx", "transpose", {"x": "a"}, perm=perm),
        node("ty", "transpose", {"x": "b"}, perm=perm),
        node("y", "mil.matmul", {"x": "tx", "y": "ty"}, transpose_y=True),
    ]
    outputs = {"out": "y", **({"ta": "tx"} if shared else {})}
    return graph(nodes, outputs, a=(shape, "fp16"), b=(shape, "fp16")), {}


def _divide(divisor: np.ndarray | None) -> tuple[dict, dict]:
    nodes = [node("y", "real_div", {"x": "x"} if divisor is not None else {"x": "x", "y": "d"})]
    extra = {"d": ([1, C, 2, 3], "fp16")} if divisor is None else {}
    weights = {"y.y": divisor} if divisor is not None else {}
    return graph(nodes, {"out": "y"}, x=X, **extra), weights


# -- repeated ops --------------------------------------------------------------------------------
def _casts(dtype: str, chain: list[str], then_relu: bool = False) -> tuple[dict, dict]:
    nodes = [
        node(f"c{i}", "cast", {"x": f"c{i - 1}" if i else "x"}, dtype=d)
        for i, d in enumerate(chain)
    ]
    if then_relu:
        nodes.append(node("r", "relu", {"x": nodes[-1]["id"]}))
    return graph(nodes, {"y": nodes[-1]["id"]}, x=([2, 5], dtype)), {}


def _chain(
    op: str, count: int, shared: bool = False, between: str | None = None, **params
) -> tuple[dict, dict]:
    nodes, source = [], "x"
    for i in range(count):
        nodes.append(node(f"{op}{i}", op, {"x": source}, **params.get(f"p{i}", params)))
        source = nodes[-1]["id"]
        if between and i == 0:
            nodes.append(node("mid", between, {"x": source}))
            source = "mid"
    outputs = {"y": source, **({"first": f"{op}0"} if shared else {})}
    return graph(nodes, outputs), {}


def _transposes(perms: list[list[int]], shared: bool = False) -> tuple[dict, dict]:
    return _chain(
        "transpose", len(perms), shared, **{f"p{i}": {"perm": p} for i, p in enumerate(perms)}
    )


def _reshapes(shapes: list[list[int]], shared: bool = False) -> tuple[dict, dict]:
    return _chain(
        "reshape", len(shapes), shared, **{f"p{i}": {"shape": s} for i, s in enumerate(shapes)}
    )


def _reduce_transposes(example: int) -> tuple[dict, dict]:
    if example == 1:  # input -> (an op) -> transpose -> transpose -> out
        nodes = [
            node("r", "relu", {"x": "x"}),
            node("t1", "transpose", {"x": "r"}, perm=[1, 0]),
            node("t2", "transpose", {"x": "t1"}, perm=[1, 0]),
        ]
        return graph(nodes, {"out": "t2"}, x=([6, 5], "fp16")), {}
    if example == 2:  # transpose -> relu -> transpose back
        nodes = [
            node("t1", "transpose", {"x": "x"}, perm=[0, 3, 1, 2]),
            node("r", "relu", {"x": "t1"}),
            node("t2", "transpose", {"x": "r"}, perm=[0, 2, 3, 1]),
        ]
        return graph(nodes, {"out": "t2"}), {}
    # 3: transpose -> relu -> pool (out1); -> relu -> log -> transpose back (out2)
    nodes = [
        node("t", "transpose", {"x": "x"}, perm=[0, 2, 3, 1]),
        node("r1", "relu", {"x": "t"}),
        node("pool", "reduce_mean", {"x": "r1"}, axes=[1, 2], keep_dims=False),
        node("r2", "relu", {"x": "t"}),
        node("log", "tanh", {"x": "r2"}),
        node("back", "transpose", {"x": "log"}, perm=[0, 3, 1, 2]),
    ]
    return graph(nodes, {"out1": "pool", "out2": "back"}, x=([10, 2, 3, 5], "fp16")), {}


def _fp32_chain(count: int, dtype: str = "fp32") -> tuple[dict, dict]:
    nodes = [node("r", "relu", {"x": "x"})]
    if count > 1:
        nodes.append(node("s", "sigmoid", {"x": "r"}))
    return graph(nodes, {"y": nodes[-1]["id"]}, x=([2, 5], dtype)), {}


def _shuffle(perm: list[int], shared: bool = False) -> tuple[dict, dict]:
    """The seed's channel shuffle: concat on channels, reshape to (B, n, C, H, W), transpose,
    reshape back."""
    nodes = [
        {"id": "cat", "op": "concat", "inputs": {"values": ["a", "b"]}, "params": {"axis": -3}},
        node("split", "reshape", {"x": "cat"}, shape=[1, 2, C, 2, 3]),
        node("t", "transpose", {"x": "split"}, perm=perm),
        node("y", "reshape", {"x": "t"}, shape=[1, 2 * C, 2, 3]),
    ]
    outputs = {"out": "y", **({"cat": "cat"} if shared else {})}
    return graph(nodes, outputs, a=X, b=X), {}


# -- the passes whose primitives came after the first pipeline --------------------------------------
def _gelu_exact(pattern: int, root: float = math.sqrt(2), shared: bool = False, mul=False):
    """0.5·x·(1 + erf(x/√2)), the seed's three groupings; x/√2 as a mul by 1/√2 when `mul`."""
    nodes = [
        node("d", "mul" if mul else "real_div", {"x": "x"}),
        node("e", "erf", {"x": "d"}),
        node("one_plus", "add", {"x": "e"}),
    ]
    if pattern == 1:  # ((1 + erf)·0.5)·x
        nodes += [node("half", "mul", {"x": "one_plus"}), node("y", "mul", {"x": "half", "y": "x"})]
    elif pattern == 2:  # ((1 + erf)·x)·0.5
        nodes += [node("half", "mul", {"x": "one_plus", "y": "x"}), node("y", "mul", {"x": "half"})]
    else:  # (x·0.5)·(1 + erf)
        nodes += [node("half", "mul", {"x": "x"}), node("y", "mul", {"x": "one_plus", "y": "half"})]
    weights = {
        "d.y": np.array([1 / root if mul else root], np.float32),
        "one_plus.y": np.array([1.0], np.float32),
        "half.y" if pattern != 2 else "y.y": np.array([0.5], np.float32),
    }
    outputs = {"out": "y", **({"erf": "e"} if shared else {})}
    return graph(nodes, outputs), weights


def _leaky(alpha: float, swapped: bool = False, shared: bool = False):
    operands = {"x": "x", "y": "m"} if swapped else {"x": "m", "y": "x"}
    nodes = [node("m", "mul", {"x": "x"}), node("y", "maximum", operands)]
    outputs = {"out": "y", **({"scaled": "m"} if shared else {})}
    return graph(nodes, outputs), {"m.y": np.array([alpha], np.float32)}


def _prelu(a: np.ndarray, minus: float = -1.0, last: bool = False, shared: bool = False):
    """relu(x) + a·relu(-1·x), the seed's pattern 1; `last`: of x transposed to channels last
    first (its pattern 2), `shared`: that transpose also an output."""
    src = "t" if last else "x"
    nodes = [node("t", "transpose", {"x": "x"}, perm=[0, 2, 3, 1])] if last else []
    nodes += [
        node("pos", "relu", {"x": src}),
        node("neg", "mul", {"x": src}),
        node("rneg", "relu", {"x": "neg"}),
        node("scaled", "mul", {"x": "rneg"}),
        node("y", "add", {"x": "pos", "y": "scaled"}),
    ]
    outputs = {"out": "y", **({"nhwc": "t"} if shared else {})}
    return graph(nodes, outputs), {"neg.y": np.array([minus], np.float32), "scaled.y": a}


def _conv_batchnorm(shared: bool = False, transpose_groups: int = 0):
    """conv (or conv_transpose with `transpose_groups` groups) then batch_norm."""
    conv, weights = _conv("c")
    if transpose_groups:
        groups = transpose_groups
        conv = node("c", "conv_transpose", {"x": "x"}, groups=groups, strides=[2, 1])
        weights = {"c.weight": values(C, C // groups, 2, 1)}
    nodes = [conv, node("y", "batch_norm", {"x": "c"}, epsilon=1e-3)]
    weights |= {
        "y.mean": values(C),
        "y.variance": values(C, low=0.5, high=2.0),
        "y.gamma": values(C),
        "y.beta": values(C),
    }
    return graph(nodes, {"out": "y", **({"conv": "c"} if shared else {})}), weights


def _norm(
    axes: list[int],
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    *,
    second_axes: list[int] | None = None,
    shared: bool = False,
    root: str = "rsqrt",
):
    """(x - mean)·rsqrt(var + 1e-5)[·gamma][+beta] spelt out (or / sqrt(...))."""
    nodes = [
        node("mean", "reduce_mean", {"x": "x"}, axes=axes, keep_dims=True),
        node("d", "sub", {"x": "x", "y": "mean"}),
        node("sq", "square", {"x": "d"}),
        node("var", "reduce_mean", {"x": "sq"}, axes=second_axes or axes, keep_dims=True),
        node("ve", "add", {"x": "var"}),
        node("r", root, {"x": "ve"}),
        node("n", "mul" if root == "rsqrt" else "real_div", {"x": "d", "y": "r"}),
    ]
    weights = {"ve.y": np.array([1e-5], np.float32)}
    last = "n"
    if gamma is not None:
        nodes.append(node("g", "mul", {"x": last}))
        weights["g.y"], last = gamma, "g"
    if beta is not None:
        nodes.append(node("b", "add", {"x": last}))
        weights["b.y"], last = beta, "b"
    return graph(nodes, {"out": last, **({"centred": "d"} if shared else {})}), weights


def _scalars(**named: float) -> dict:
    return {k.replace("__", "."): np.array([v], np.float32) for k, v in named.items()}


def _norm_twice(power: float = 0.5):
    """coremltools' pattern 2: x - mean twice (one squared, one divided), the root as pow 0.5,
    then gamma and beta per channel."""
    nodes = [
        node("mean", "reduce_mean", {"x": "x"}, axes=[2, 3], keep_dims=True),
        node("d", "sub", {"x": "x", "y": "mean"}),
        node("d2", "sub", {"x": "x", "y": "mean"}),
        node("sq", "square", {"x": "d"}),
        node("var", "reduce_mean", {"x": "sq"}, axes=[2, 3], keep_dims=True),
        node("ve", "add", {"x": "var"}),
        node("root", "pow", {"x": "ve"}),
        node("n", "real_div", {"x": "d2", "y": "root"}),
        node("g", "mul", {"x": "n"}),
        node("b", "add", {"x": "g"}),
    ]
    weights = _scalars(ve__y=1e-5, root__y=power)
    weights |= {"g.y": values(1, C, 1, 1, low=0.5, high=1.5), "b.y": values(1, C, 1, 1)}
    return graph(nodes, {"out": "b"}), weights


def _norm_shifted(minus: float = -1.0):
    """coremltools' pattern 3 (TensorFlow Addons): x·r + (-1)·(mean·r), r = rsqrt(var + eps)."""
    nodes = [
        node("mean", "reduce_mean", {"x": "x"}, axes=[2, 3], keep_dims=True),
        node("d", "sub", {"x": "x", "y": "mean"}),
        node("sq", "square", {"x": "d"}),
        node("var", "reduce_mean", {"x": "sq"}, axes=[2, 3], keep_dims=True),
        node("ve", "add", {"x": "var"}),
        node("r", "rsqrt", {"x": "ve"}),
        node("xr", "mul", {"x": "x", "y": "r"}),
        node("mr", "mul", {"x": "r", "y": "mean"}),
        node("neg", "mul", {"x": "mr"}),
        node("y", "add", {"x": "xr", "y": "neg"}),
    ]
    return graph(nodes, {"out": "y"}), _scalars(ve__y=1e-3, neg__y=minus)


def _norm_moments(count: int = 6, shared: bool = False):
    """coremltools' pattern 4: mean and mean of squares as reduce_sum · 1/N, the variance
    mean(x²) - mean², then x·s + (beta - mean·s) with s = gamma·rsqrt(var + eps)."""
    nodes = [
        node("sum", "reduce_sum", {"x": "x"}, axes=[2, 3], keep_dims=True),
        node("mean", "mul", {"x": "sum"}),
        node("xx", "mul", {"x": "x", "y": "x"}),
        node("sum2", "reduce_sum", {"x": "xx"}, axes=[2, 3], keep_dims=True),
        node("e2", "mul", {"x": "sum2"}),
        node("mm", "mul", {"x": "mean", "y": "mean"}),
        node("var", "sub", {"x": "e2", "y": "mm"}),
        node("ve", "add", {"x": "var"}),
        node("r", "rsqrt", {"x": "ve"}),
        node("s", "mul", {"x": "r"}),
        node("xs", "mul", {"x": "x", "y": "s"}),
        node("ms", "mul", {"x": "s", "y": "mean"}),
        node("shift", "sub", {"y": "ms"}),
        node("y", "add", {"x": "xs", "y": "shift"}),
    ]
    weights = _scalars(mean__y=1 / count, e2__y=1 / count, ve__y=1e-3)
    weights |= {"s.y": values(1, C, 1, 1, low=0.5, high=1.5), "shift.x": values(1, C, 1, 1)}
    return graph(nodes, {"out": "y", **({"mean": "mean"} if shared else {})}), weights


def _norm_bc1s(gamma_shape=(1, C, 1, 1)):
    """coremltools' pattern 5 (ml-ane-transformers' LayerNorm over the channels of (B, C, 1, S)):
    d·rsqrt(mean(d·d) + eps), then beta added before gamma multiplies."""
    nodes = [
        node("mean", "reduce_mean", {"x": "x"}, axes=[1], keep_dims=True),
        node("d", "sub", {"x": "x", "y": "mean"}),
        node("sq", "mul", {"x": "d", "y": "d"}),
        node("var", "reduce_mean", {"x": "sq"}, axes=[1], keep_dims=True),
        node("ve", "add", {"x": "var"}),
        node("r", "rsqrt", {"x": "ve"}),
        node("n", "mul", {"x": "r", "y": "d"}),
        node("b", "add", {"x": "n"}),
        node("g", "mul", {"x": "b"}),
    ]
    weights = _scalars(ve__y=1e-5)
    weights |= {"b.y": values(1, C, 1, 1), "g.y": values(*gamma_shape, low=0.5, high=1.5)}
    return graph(nodes, {"out": "g"}), weights


def _conv1d(axis: int = 2, shared: bool = False, width: int = 3, const_weight: bool = True, **conv):
    """TensorFlow's Conv1D: expand_dims -> a conv one high -> squeeze (the seed's pattern 1); a
    kernel one wide lets a near-miss's other axis still type."""
    nodes = [
        node("e", "expand_dims", {"x": "x"}, axes=[axis]),
        node("c", "mil.conv", {"x": "e"} if const_weight else {"x": "e", "weight": "w"}, **conv),
        node("y", "squeeze", {"x": "c"}, axes=[axis]),
    ]
    extra = {} if const_weight else {"w": ([5, C, 1, width], "fp16")}
    outputs = {"out": "y", **({"wide": "e"} if shared else {})}
    body = graph(nodes, outputs, x=([1, C, 8], "fp16"), **extra)
    weights = {"c.bias": values(5)}
    if const_weight:
        weights["c.weight"] = values(5, C, 1, width)
    return body, weights


def _conv1d_last(
    axis: int = 1,
    perm=(0, 3, 1, 2),
    back=(0, 2, 3, 1),
    width: int = 3,
    shared: bool = False,
    const_weight: bool = True,
    bias_after: bool = False,
    **conv,
):
    """TensorFlow's Conv1D on channels last x (B, S, C) (the seed's pattern 2): expand_dims ->
    transpose to (B, C, 1, S) -> a conv one high -> transpose back -> squeeze; a kernel one wide
    lets a near-miss's other perm or axis still type."""
    nodes = [
        node("e", "expand_dims", {"x": "x"}, axes=[axis]),
        node("t", "transpose", {"x": "e"}, perm=list(perm)),
        node("c", "mil.conv", {"x": "t"} if const_weight else {"x": "t", "weight": "w"}, **conv),
        node("b", "transpose", {"x": "c"}, perm=list(back)),
        node("y", "squeeze", {"x": "b"}, axes=[axis]),
    ]
    out = "y"
    if bias_after:  # TensorFlow's bias add, after the squeeze
        nodes.append(node("yb", "add", {"x": "y"}))
        out = "yb"
    extra = {} if const_weight else {"w": ([5, C, 1, width], "fp16")}
    outputs = {"out": out, **({"wide": "t"} if shared else {})}
    body = graph(nodes, outputs, x=([1, 8, C], "fp16"), **extra)
    weights = {"c.bias": values(5)}
    if const_weight:
        weights["c.weight"] = values(5, C, 1, width)
    if bias_after:
        weights["yb.y"] = values(5)
    return body, weights


def _moved_weight(scale: np.ndarray, *moves: tuple[str, dict], shared: bool = False):
    """A dequantized int8 weight [4, 6] (a scalar scale, or one per column) moved (transposed,
    reshaped), then multiplying x."""
    per_column = scale.size > 1
    dq = node("dq", "dequantize", {}, **({"axis": 1} if per_column else {"scale": float(scale)}))
    nodes, last = [dq], "dq"
    for i, (op, params) in enumerate(moves):
        nodes.append(node(f"m{i}", op, {"x": last}, **params))
        last = f"m{i}"
    nodes.append(node("y", "mul", {"x": "x", "y": last}))
    weights = {"dq.input": np.random.default_rng(3).integers(-100, 100, (4, 6)).astype(np.int8)}
    if per_column:
        weights["dq.scale"] = scale
    outputs = {"out": "y", **({"weight": "dq"} if shared else {})}
    return graph(nodes, outputs, x=([1, 6, 4], "fp32")), weights


def _matmul_bias(op: str = "add", bias_shape=(5,), const_weight: bool = True, first=False):
    mm = node("mm", "mil.matmul", {"x": "a"} if const_weight else {"x": "a", "y": "w"})
    inputs = {"x": "b_", "y": "mm"} if first else {"x": "mm"}
    nodes = [mm, node("y", op, inputs)]
    extra = {} if const_weight else {"w": ([16, 5], "fp16")}
    body = graph(nodes, {"out": "y"}, a=([8, 16], "fp16"), **extra)
    weights = {"y.x" if first else "y.y": values(*bias_shape)}
    if first:
        nodes[1]["inputs"] = {"y": "mm"}
    if const_weight:
        weights["mm.y"] = values(16, 5, low=-0.3, high=0.3)
    return body, weights


def _linear_bias(op: str = "add", first: bool = False, bias_shape=(5,)):
    nodes = [
        node("lin", "linear", {"x": "a"}),
        node("y", op, {"y": "lin"} if first else {"x": "lin"}),
    ]
    weights = {
        "lin.weight": values(5, 16, low=-0.3, high=0.3),
        "lin.bias": values(5),
        ("y.x" if first else "y.y"): values(*bias_shape),
    }
    return graph(nodes, {"out": "y"}, a=([8, 16], "fp16")), weights


def _paddings(first: dict, second: dict):
    nodes = [node("p1", "pad", {"x": "x"}, **first), node("p2", "pad", {"x": "p1"}, **second)]
    return graph(nodes, {"out": "p2"}, x=([1, 2, 6, 8], "fp16")), {}


def _pad_conv(transpose: bool = False, value: float = 0.0, pad=(0, 0, 0, 0, 1, 1, 2, 0)):
    """pad -> conv, or the seed's pad -> transpose -> conv."""
    nodes = [node("p", "pad", {"x": "x"}, pad=list(pad), constant_val=value)]
    source = "p"
    if transpose:
        nodes.append(node("t", "transpose", {"x": "p"}, perm=[0, 1, 3, 2]))
        source = "t"
    conv, weights = _conv("c", source)
    nodes.append(conv)
    return graph(nodes, {"out": "c"}), weights


def _dequantize_const(input_const: bool = True):
    if input_const:
        nodes = [node("dq", "dequantize", {}, scale=0.05), node("y", "add", {"x": "dq", "y": "x"})]
        weights = {"dq.input": RNG_Q.integers(-100, 100, (1, C, 2, 3)).astype(np.int8)}
        return graph(nodes, {"out": "y"}, x=FP32_X), weights
    nodes = [
        node("q", "quantize", {"input": "x"}, output_dtype="int8", scale=0.05),
        node("dq", "dequantize", {"input": "q"}, scale=0.05),
        node("y", "add", {"x": "dq", "y": "x"}),
    ]
    return graph(nodes, {"out": "y"}, x=FP32_X), {}


def _requantized(scale: float = 0.05, shared: bool = False):
    """quantize -> dequantize -> quantize (same parameters) -> dequantize."""
    nodes = [
        node("q", "quantize", {"input": "x"}, output_dtype="int8", scale=0.05),
        node("dq", "dequantize", {"input": "q"}, scale=0.05),
        node("q2", "quantize", {"input": "dq"}, output_dtype="int8", scale=scale),
        node("y", "dequantize", {"input": "q2"}, scale=scale),
    ]
    return graph(nodes, {"out": "y", **({"mid": "dq"} if shared else {})}), {}


RNG_Q = np.random.default_rng(3)
QUANTIZED_RESHAPE = ["quantize", "dequantize", "reshape", "quantize", "dequantize"]
QRESHAPED = ["quantize", "reshape", "dequantize"]
FP32_X = ([1, C, 2, 3], "fp32")  # dequantize gives its scale's dtype: fp32 here


def _quantized_reshape(
    scale: float = 0.025, shared: str = "", dtype: str = "int8"
) -> tuple[dict, dict]:
    """The seed's dequantize -> reshape -> quantize, between the quantize that makes integers of
    x (a graph's inputs are floats) and the dequantize that gives floats back; the second
    quantize with `scale` (the first's: 0.025, spanning int8's range over the values drawn, so
    that the default pipeline's fp16 compute moves a value one step at most, within the
    tolerance). Another zero point is test_int_op_canonicalization_keeps_another_zero_point's
    (a graph's zero point is a vector). `shared`: a value also read as an output ("dq": the dequantize, "r":
    the float reshape)."""
    nodes = [
        node("q", "quantize", {"input": "x"}, output_dtype=dtype, scale=0.025),
        node("dq", "dequantize", {"input": "q"}, scale=0.025),
        node("r", "reshape", {"x": "dq"}, shape=[1, C, 6]),
        node("q2", "quantize", {"input": "r"}, output_dtype=dtype, scale=scale),
        node("y", "dequantize", {"input": "q2"}, scale=scale),
    ]
    return graph(nodes, {"out": "y", **({"mid": shared} if shared else {})}, x=FP32_X), {}


def _select(cond: np.ndarray, a: np.ndarray | None = None):
    """select(cond, relu(x) or a constant, sigmoid(x2))."""
    nodes = [
        node("s2", "sigmoid", {"x": "x2"}),
        node("y", "select", {"a": "r", "b": "s2"} if a is None else {"b": "s2"}),
    ]
    if a is None:
        nodes.insert(0, node("r", "relu", {"x": "x"}))
    weights = {"y.cond": cond, **({"y.a": a} if a is not None else {})}
    return graph(nodes, {"out": "y"}, x=X, x2=X), weights


def _scale_shift(shape=(1, C, 1, 1)):
    nodes = [node("m", "mul", {"x": "x"}), node("y", "add", {"x": "m"})]
    return graph(nodes, {"out": "y"}), {"m.y": values(*shape), "y.y": values(*shape)}


def _conv_transpose(output_shape: bool = False):
    params = {"output_shape": [1, C, 2, 3]} if output_shape else {}
    nodes = [node("y", "conv_transpose", {"x": "x"}, **params)]
    return graph(nodes, {"out": "y"}), {"y.weight": values(C, C, 1, 1)}


def _zero_points(zero: int, dtype: str = "int8", const_input: bool = False):
    """quantize -> dequantize per channel with zero points `zero`, or a dequantized constant."""
    np_dtype = np.int8 if dtype == "int8" else np.uint8
    scale = np.array([0.05, 0.02, 0.04, 0.03], np.float32)
    zeros = np.full(C, zero, np_dtype)
    deq = node("dq", "dequantize", {} if const_input else {"input": "q"}, axis=1)
    nodes = [deq, node("y", "add", {"x": "dq", "y": "x"})]
    weights = {"dq.scale": scale, "dq.zero_point": zeros}
    if const_input:
        low, high = (-128, 127) if dtype == "int8" else (0, 255)
        weights["dq.input"] = RNG_Q.integers(low, high, (1, C, 2, 3)).astype(np_dtype)
    else:
        nodes.insert(0, node("q", "quantize", {"input": "x"}, output_dtype=dtype, axis=1))
        weights |= {"q.scale": scale, "q.zero_point": zeros}
    return graph(nodes, {"out": "y"}, x=FP32_X), weights


def _onehot_matmul(on: float = 1.0, axis: int = -1):
    nodes = [
        node(
            "oh",
            "one_hot",
            {"indices": "i"},
            one_hot_vector_size=5,
            axis=axis,
            on_value=on,
            off_value=0.0,
        ),
        node("y", "mil.matmul", {"x": "oh"}),
    ]
    body = graph(nodes, {"out": "y"}, i=([2, 3], "int32"))
    return body, {"y.y": values(5, 4) if axis == -1 else values(2, 4)}


def _stack_reshape(axis: int, shape: list[int]):
    nodes = [
        {"id": "s", "op": "stack", "inputs": {"values": ["a", "b"]}, "params": {"axis": axis}},
        node("y", "reshape", {"x": "s"}, shape=shape),
    ]
    return graph(nodes, {"out": "y"}, a=([1, 5, 3, 4], "fp16"), b=([1, 5, 3, 4], "fp16")), {}


def _reflection(left: int = 1, right: int = 1, shift: int = 0):
    """The seed's concat of x's mirrored slices around x along the last axis (x 1×2×6×8)."""
    parts, nodes = [], [node("r", "relu", {"x": "x"})]
    for k in range(left, 0, -1):
        nodes.append(
            node(
                f"l{k}",
                "slice_by_index",
                {"x": "r"},
                begin=[0, 0, 0, k + shift],
                end=[1, 2, 6, k + shift + 1],
            )
        )
        parts.append(f"l{k}")
    parts.append("r")
    for k in range(right):
        nodes.append(
            node(
                f"q{k}",
                "slice_by_index",
                {"x": "r"},
                begin=[0, 0, 0, -2 - k],
                end=[1, 2, 6, -1 - k],
            )
        )
        parts.append(f"q{k}")
    nodes.append({"id": "y", "op": "concat", "inputs": {"values": parts}, "params": {"axis": 3}})
    return graph(nodes, {"out": "y"}, x=([1, 2, 6, 8], "fp16")), {}


def _up_convolution(outer_axis: int = 3):
    """FCRN's fast up-convolution: two interleaved concats along H, then one along W."""

    def cat(id, values, axis):
        params = {"axis": axis, "interleave": True}
        return {"id": id, "op": "concat", "inputs": {"values": values}, "params": params}

    nodes = [
        cat("top", ["a", "b"], 2),
        cat("bottom", ["c", "d"], 2),
        cat("y", ["top", "bottom"], outer_axis),
    ]
    inputs = {k: ([1, C, 2, 3], "fp16") for k in "abcd"}
    return graph(nodes, {"out": "y"}, **inputs), {}


def _quantized_add(shared: bool = False):
    """dequantize(x) + dequantize(x2) quantized again (an activation-quantized add); each
    scale spans int8's range over the values drawn (standard normal), so that fp16 compute
    (the default pipeline's) moves a result by one step at most within the tolerance."""
    nodes = [
        node("qx", "quantize", {"input": "x"}, output_dtype="int8", scale=0.025),
        node("dx", "dequantize", {"input": "qx"}, scale=0.025),
        node("qy", "quantize", {"input": "x2"}, output_dtype="int8", scale=0.03),
        node("dy", "dequantize", {"input": "qy"}, scale=0.03),
        node("s", "add", {"x": "dx", "y": "dy"}),
        node("qz", "quantize", {"input": "s"}, output_dtype="int8", scale=0.05),
        node("y", "dequantize", {"input": "qz"}, scale=0.05),
    ]
    outputs = {"out": "y", **({"sum": "s"} if shared else {})}
    return graph(nodes, outputs, x=FP32_X, x2=FP32_X), {}


# -- beyond the seed: the ANE's passes ------------------------------------------------------------
def _token_major_matmul(
    bias: bool = True, back: list[int] | None = None, const_weight=True, shared=False, rank3=False
):
    """x (B, C, 1, S), or (B, C, S) when `rank3`, -> transpose channels last -> matmul by
    W [C, 5] [-> + b] -> transpose back: a linear over the channels written token-major."""
    nodes = [
        node("t", "transpose", {"x": "x"}, perm=[0, 2, 1] if rank3 else [0, 2, 3, 1]),
        node("mm", "mil.matmul", {"x": "t"} if const_weight else {"x": "t", "y": "w"}),
    ]
    last = "mm"
    weights = {"mm.y": values(C, 5, low=-0.5, high=0.5)} if const_weight else {}
    if bias:
        nodes.append(node("b", "add", {"x": "mm"}))
        weights["b.y"], last = values(5), "b"
    nodes.append(
        node("y", "transpose", {"x": last}, perm=back or ([0, 2, 1] if rank3 else [0, 3, 1, 2]))
    )
    extra = {} if const_weight else {"w": ([C, 5], "fp16")}
    outputs = {"out": "y", **({"product": "mm"} if shared else {})}
    x = ([1, C, 6] if rank3 else [1, C, 1, 6], "fp16")
    return graph(nodes, outputs, x=x, **extra), weights


def _rank5(perm: list[int], inside: list[str] = (), constant: np.ndarray | None = None):
    """reshape [1, 4, 2, 3] to [1, 2, 2, 2, 3], transpose, [ops], reshape back to rank 4."""
    nodes = [
        node("split", "reshape", {"x": "x"}, shape=[1, 2, 2, 2, 3]),
        node("t", "transpose", {"x": "split"}, perm=perm),
    ]
    last, weights = "t", {}
    for i, op in enumerate(inside):
        nodes.append(node(f"u{i}", op, {"x": last}))
        if op in ("mul", "add"):
            weights[f"u{i}.y"] = constant if constant is not None else np.array([0.5], np.float32)
        last = f"u{i}"
    nodes.append(node("y", "reshape", {"x": last}, shape=[1, 4, 2, 3]))
    return graph(nodes, {"out": "y"}), weights


def _rank6(
    perm: list[int],
    split: list[int] = (1, 2, 2, 2, 2, 3),
    back: list[int] = (1, 2, 4, 6),
    after: str = "reshape",
    shared: bool = False,
):
    """The seed's example as a depth-to-space writes it: x [1, 8, 2, 3] reshaped to rank 6
    [N, b, b, C, H, W], transposed (by default to [N, C, H, b, W, b]) and reshaped back to
    rank 4 [N, C, H·b, W·b]; `after`, `shared` and the ranks make its edges."""
    nodes = [
        node("split", "reshape", {"x": "x"}, shape=list(split)),
        node("t", "transpose", {"x": "split"}, perm=perm),
        node("y", after, {"x": "t"}, **({"shape": list(back)} if after == "reshape" else {})),
    ]
    outputs = {"out": "y", **({"moved": "t"} if shared else {})}
    return graph(nodes, outputs, x=([1, 8, 2, 3], "fp16")), {}


D2S = [0, 3, 4, 1, 5, 2]  # [N, b1, b2, C, H, W] -> [N, C, H, b1, W, b2]


def _case(id, graph_pass, made, after, fires=True, prelude=(), **options) -> Case:
    body, weights = made
    return Case(id, graph_pass, body, weights, after, fires, options, prelude)


CASES = [
    # cleanup
    _case("dedup", "const_deduplication", _dedup(128), ["matmul", "add", "matmul", "add"]),
    _case("dedup-small", "const_deduplication", _dedup(8), ["matmul", "add", "matmul", "add"]),
    _case(
        "dedup-differ",
        "const_deduplication",
        _dedup(128, same=False),
        ["matmul", "add"] * 2,
        fires=False,
    ),
    _case("fold", "const_elimination", _folded(True), ["mul"]),
    _case("fold-input", "const_elimination", _folded(False), ["exp", "mul"], fires=False),
    _case("reduce-mean", "fuse_reduce_mean", _reduce_mean(1 / C), ["reduce_mean"]),
    _case("reduce-mean-div", "fuse_reduce_mean", _reduce_mean(C, div=True), ["reduce_mean"]),
    _case(
        "reduce-mean-other",
        "fuse_reduce_mean",
        _reduce_mean(1 / (C + 1)),
        ["reduce_sum", "mul"],
        fires=False,
    ),
    _case(
        "reduce-mean-shared",
        "fuse_reduce_mean",
        _reduce_mean(1 / C, shared=True),
        ["reduce_sum", "mul"],
        fires=False,
    ),
    _case("noop-reshape", "noop_elimination", _noop("reshape"), ["add"]),
    _case("noop-add-zero", "noop_elimination", _noop("add_zero"), ["add"]),
    _case("noop-mul-one", "noop_elimination", _noop("mul_one"), ["add"]),
    _case("noop-transpose", "noop_elimination", _noop("transpose_identity"), ["add"]),
    _case(
        "noop-reshape-other",
        "noop_elimination",
        _noop("reshape_other"),
        ["reshape", "add"],
        fires=False,
    ),
    _case(
        "noop-broadcast",
        "noop_elimination",
        _noop("add_zero_broadcast"),
        ["add", "add"],
        fires=False,
    ),
    _case("noop-small", "noop_elimination", _noop("add_small"), ["add", "add"], fires=False),
    _case("noop-mul-one-left", "noop_elimination", _noop("mul_one_left"), ["add"]),
    _case(
        "noop-zero-minus", "noop_elimination", _noop("sub_from_zero"), ["sub", "add"], fires=False
    ),
    _case("noop-max", "noop_elimination", _noop("max_lowest"), ["maximum", "add"], fires=False),
    _case("noop-sum-of-one", "noop_elimination", _noop("sum_one"), ["add"]),
    _case(
        "noop-norm-of-one",
        "noop_elimination",
        _noop("l2_one"),
        ["reduce_l2_norm", "add"],
        fires=False,
    ),
    _case("noop-concat-of-one", "noop_elimination", _noop("concat_one"), ["add"]),
    _case(
        "redundant", "remove_redundant_ops", _redundant(), ["relu", "sigmoid", "sub", "add", "mul"]
    ),
    _case(
        "redundant-constant",
        "remove_redundant_ops",
        _redundant(same_constant=False),
        ["relu", "sigmoid", "sub", "add", "add", "mul"],
    ),
    _case(
        "redundant-swapped",
        "remove_redundant_ops",
        _redundant(swapped=True),
        ["relu", "sigmoid", "sub", "sub", "add", "add", "mul"],
        fires=False,
    ),
    # activations
    _case("gelu-tanh-1", "fuse_gelu_tanh_approximation", _gelu_tanh(1), ["gelu"]),
    _case("gelu-tanh-2", "fuse_gelu_tanh_approximation", _gelu_tanh(2), ["gelu"]),
    _case("gelu-tanh-pow", "fuse_gelu_tanh_approximation", _gelu_tanh(1, power=3.0), ["gelu"]),
    _case(
        "gelu-tanh-pow-2",
        "fuse_gelu_tanh_approximation",
        _gelu_tanh(1, power=2.0),
        ["pow", "mul", "add", "mul", "tanh", "add", "mul", "mul"],
        fires=False,
    ),
    _case(
        "gelu-tanh-constant",
        "fuse_gelu_tanh_approximation",
        _gelu_tanh(1, cubic=0.04),
        ["square", "mul", "mul", "add", "mul", "tanh", "add", "mul", "mul"],
        fires=False,
    ),
    _case(
        "gelu-tanh-shared",
        "fuse_gelu_tanh_approximation",
        _gelu_tanh(2, shared=True),
        ["square", "mul", "mul", "add", "mul", "tanh", "add", "mul", "mul"],
        fires=False,
    ),
    # convolutions
    _case("conv-bias", "fuse_conv_bias", _conv_then("add", values(1, C, 1, 1)), ["conv"]),
    _case("conv-bias-sub", "fuse_conv_bias", _conv_then("sub", values(C, 1, 1)), ["conv"]),
    _case(
        "conv-bias-transposed",
        "fuse_conv_bias",
        _conv_then("add", values(1, 1, C), transpose=True),
        ["conv", "transpose"],
    ),
    _case(
        "conv-bias-spatial",
        "fuse_conv_bias",
        _conv_then("add", values(1, C, 2, 3)),
        ["conv", "add"],
        fires=False,
    ),
    _case(
        "conv-bias-shared",
        "fuse_conv_bias",
        _conv_then("add", values(1, C, 1, 1), shared=True),
        ["conv", "add"],
        fires=False,
    ),
    _case(
        "conv-bias-input", "fuse_conv_bias", _conv_then("add", None), ["conv", "add"], fires=False
    ),
    _case("conv-scale", "fuse_conv_scale", _conv_then("mul", values(C, 1, 1, low=0.5)), ["conv"]),
    _case(
        "conv-scale-div",
        "fuse_conv_scale",
        _conv_then("real_div", values(1, C, 1, 1, low=0.5)),
        ["conv"],
    ),
    _case(
        "conv-scale-spatial",
        "fuse_conv_scale",
        _conv_then("mul", values(1, 1, 2, 3)),
        ["conv", "mul"],
        fires=False,
    ),
    _case(
        "conv-scale-input", "fuse_conv_scale", _conv_then("mul", None), ["conv", "mul"], fires=False
    ),
    _case(
        "conv-scale-quantized",
        "fuse_conv_scale",
        _quantized_conv_scale(),
        ["constexpr_lut_to_dense", "conv", "mul"],
        fires=False,
    ),
    # elementwise binary, linear
    _case("divide", "divide_to_multiply", _divide(values(1, C, 1, 1, low=0.5)), ["mul"]),
    _case("divide-input", "divide_to_multiply", _divide(None), ["real_div"], fires=False),
    _case(
        "divide-zero",
        "divide_to_multiply",
        _divide(np.array([0.0, 1, 2, 3], np.float32).reshape(1, C, 1, 1)),
        ["real_div"],
        fires=False,
    ),
    _case("transpose-matmul", "fuse_transpose_matmul", _transposed_matmul([1, 0]), ["matmul"]),
    _case(
        "transpose-matmul-rank3",
        "fuse_transpose_matmul",
        _transposed_matmul([1, 0, 2]),
        ["transpose", "transpose", "matmul"],
        fires=False,
    ),
    _case(
        "transpose-matmul-shared",
        "fuse_transpose_matmul",
        _transposed_matmul([1, 0], shared=True),
        ["transpose", "matmul"],
    ),
    # repeated ops
    _case("cast-same", "cast_optimization", _casts("fp16", ["fp16"], then_relu=True), ["relu"]),
    _case("cast-pair", "cast_optimization", _casts("fp16", ["fp32", "int32"]), ["cast"]),
    _case(
        "cast-round-trip",
        "cast_optimization",
        _casts("fp16", ["fp32", "fp16"], then_relu=True),
        ["relu"],
    ),
    _case(
        "cast-bool",
        "cast_optimization",
        _casts("fp32", ["bool", "fp16"]),
        ["cast", "cast"],
        fires=False,
    ),
    _case(
        "cast-int",
        "cast_optimization",
        _casts("int32", ["fp16", "fp32"]),
        ["cast", "cast"],
        fires=False,
    ),
    _case("relus", "merge_consecutive_relus", _chain("relu", 3), ["relu"]),
    _case(
        "relus-between",
        "merge_consecutive_relus",
        _chain("relu", 2, between="abs"),
        ["relu", "abs", "relu"],
        fires=False,
    ),
    _case(
        "reshapes", "merge_consecutive_reshapes", _reshapes([[4, 6], [2, 12], [1, 24]]), ["reshape"]
    ),
    _case(
        "reshapes-shared",
        "merge_consecutive_reshapes",
        _reshapes([[4, 6], [2, 12]], shared=True),
        ["reshape", "reshape"],
        fires=False,
    ),
    _case(
        "transposes",
        "merge_consecutive_transposes",
        _transposes([[0, 2, 1, 3], [3, 1, 2, 0], [0, 1, 3, 2]]),
        ["transpose"],
    ),
    _case(
        "transposes-shared",
        "merge_consecutive_transposes",
        _transposes([[0, 2, 1, 3], [3, 1, 2, 0]], shared=True),
        ["transpose", "transpose"],
        fires=False,
    ),
    _case("reduce-transposes-1", "reduce_transposes", _reduce_transposes(1), ["relu"]),
    _case("reduce-transposes-2", "reduce_transposes", _reduce_transposes(2), ["relu"]),
    _case(
        "reduce-transposes-3",
        "reduce_transposes",
        _reduce_transposes(3),
        ["relu", "transpose", "reduce_mean", "relu", "tanh"],
    ),
    _case(
        "reduce-transposes-other-axis",
        "reduce_transposes",
        _transposes([[0, 3, 1, 2], [0, 3, 1, 2]]),
        ["transpose", "transpose"],
        fires=False,
    ),
    _case("shuffle", "detect_concat_interleave", _shuffle([0, 2, 1, 3, 4]), ["concat"]),
    _case(
        "shuffle-other-perm",
        "detect_concat_interleave",
        _shuffle([0, 2, 1, 4, 3]),
        ["concat", "reshape", "transpose", "reshape"],
        fires=False,
    ),
    _case(
        "shuffle-shared",
        "detect_concat_interleave",
        _shuffle([0, 2, 1, 3, 4], shared=True),
        ["concat", "reshape", "transpose", "reshape"],
        fires=False,
    ),
    # quantization
    _case("fp16-cast", "add_fp16_cast", _fp32_chain(1), ["cast", "relu", "cast"]),
    _case(
        "fp16-cast-chain",
        "add_fp16_cast",
        _fp32_chain(2),
        ["cast", "relu", "cast", "cast", "sigmoid", "cast"],
    ),
    _case(
        "fp16-cast-fp16", "add_fp16_cast", _fp32_chain(2, "fp16"), ["relu", "sigmoid"], fires=False
    ),
    _case(
        "fp16-cast-skipped",
        "add_fp16_cast",
        _fp32_chain(1),
        ["relu"],
        fires=False,
        skip_ops_by_type="relu",
    ),
    # the passes whose primitives came after the first pipeline
    _case("gelu-exact-1", "fuse_gelu_exact", _gelu_exact(1), ["gelu"]),
    _case("gelu-exact-2", "fuse_gelu_exact", _gelu_exact(2), ["gelu"]),
    _case("gelu-exact-3", "fuse_gelu_exact", _gelu_exact(3), ["gelu"]),
    _case("gelu-exact-mul", "fuse_gelu_exact", _gelu_exact(1, mul=True), ["gelu"]),
    _case(
        "gelu-exact-constant",
        "fuse_gelu_exact",
        _gelu_exact(1, root=1.5),
        ["real_div", "erf", "add", "mul", "mul"],
        fires=False,
    ),
    _case(
        "gelu-exact-shared",
        "fuse_gelu_exact",
        _gelu_exact(3, shared=True),
        ["real_div", "erf", "add", "mul", "mul"],
        fires=False,
    ),
    _case("leaky-relu", "fuse_leaky_relu", _leaky(0.2), ["leaky_relu"]),
    _case("leaky-relu-swapped", "fuse_leaky_relu", _leaky(0.2, swapped=True), ["leaky_relu"]),
    _case("leaky-relu-alpha", "fuse_leaky_relu", _leaky(1.5), ["mul", "maximum"], fires=False),
    _case(
        "leaky-relu-shared",
        "fuse_leaky_relu",
        _leaky(0.2, shared=True),
        ["mul", "maximum"],
        fires=False,
    ),
    _case("prelu", "fuse_prelu", _prelu(values(1, C, 1, 1)), ["prelu"]),
    _case("prelu-chw", "fuse_prelu", _prelu(values(C, 1, 1)), ["prelu"]),
    _case(
        "prelu-spatial",
        "fuse_prelu",
        _prelu(values(1, 1, 2, 3)),
        ["relu", "mul", "relu", "mul", "add"],
        fires=False,
    ),
    _case(
        "prelu-minus-two",
        "fuse_prelu",
        _prelu(values(1, C, 1, 1), minus=-2.0),
        ["relu", "mul", "relu", "mul", "add"],
        fires=False,
    ),
    _case(
        "prelu-channels-last", "fuse_prelu", _prelu(values(C), last=True), ["prelu", "transpose"]
    ),
    _case(
        "prelu-channels-last-1114",
        "fuse_prelu",
        _prelu(values(1, 1, 1, C), last=True),
        ["prelu", "transpose"],
    ),
    _case(
        "prelu-channels-last-shared",
        "fuse_prelu",
        _prelu(values(C), last=True, shared=True),
        ["transpose", "relu", "mul", "relu", "mul", "add"],
        fires=False,
    ),
    _case(
        "prelu-channels-last-spatial",
        "fuse_prelu",
        _prelu(values(1, 1, 3, 1), last=True),
        ["transpose", "relu", "mul", "relu", "mul", "add"],
        fires=False,
    ),
    _case("conv1d", "compose_conv1d", _conv1d(strides=[1, 2], dilations=[1, 2]), ["conv"]),
    _case(
        "conv1d-minus-two-padded",
        "compose_conv1d",
        _conv1d(axis=-2, pad_type="custom", pad=[0, 0, 1, 2]),
        ["conv"],
    ),
    _case(
        "conv1d-padded-row",
        "compose_conv1d",
        _conv1d(pad_type="custom", pad=[1, 0, 0, 0], strides=[2, 1]),
        ["expand_dims", "conv", "squeeze"],
        fires=False,
    ),
    _case(
        "conv1d-shared",
        "compose_conv1d",
        _conv1d(shared=True),
        ["expand_dims", "conv", "squeeze"],
        fires=False,
    ),
    _case(  # the dummy axis last: (B, C, S, 1), the conv runs over (S, 1)
        "conv1d-other-axis",
        "compose_conv1d",
        _conv1d(axis=3, width=1),
        ["expand_dims", "conv", "squeeze"],
        fires=False,
    ),
    _case(
        "conv1d-input-weight",
        "compose_conv1d",
        _conv1d(const_weight=False),
        ["expand_dims", "conv", "squeeze"],
        fires=False,
    ),
    _case(
        "conv1d-channels-last",
        "compose_conv1d",
        _conv1d_last(strides=[1, 2], dilations=[1, 2]),
        ["transpose", "conv", "transpose"],
    ),
    _case(
        "conv1d-channels-last-minus-three-padded",
        "compose_conv1d",
        _conv1d_last(
            axis=-3, perm=(0, -1, 1, 2), back=(0, 2, -1, 1), pad_type="custom", pad=[0, 0, 2, 1]
        ),
        ["transpose", "conv", "transpose"],
    ),
    _case(
        "conv1d-channels-last-bias-add",
        "compose_conv1d",
        _conv1d_last(bias_after=True),
        ["transpose", "conv", "transpose", "add"],
    ),
    _case(  # the bias add after the squeeze: fuse_conv_bias folds it through the transpose
        "conv1d-channels-last-then-bias",
        "fuse_conv_bias",
        _conv1d_last(bias_after=True),
        ["transpose", "conv", "transpose"],
        prelude=("compose_conv1d",),
    ),
    _case(
        "conv1d-channels-last-shared",
        "compose_conv1d",
        _conv1d_last(shared=True),
        ["expand_dims", "transpose", "conv", "transpose", "squeeze"],
        fires=False,
    ),
    _case(  # both perms swap S and C instead (the conv runs along S·1 as H·W = S·1)
        "conv1d-channels-last-other-perm",
        "compose_conv1d",
        _conv1d_last(perm=(0, 3, 2, 1), back=(0, 3, 2, 1), width=1),
        ["expand_dims", "transpose", "conv", "transpose", "squeeze"],
        fires=False,
    ),
    _case(  # back to channels first: perm (0, 2, 1, 3)
        "conv1d-channels-last-other-back-perm",
        "compose_conv1d",
        _conv1d_last(back=(0, 2, 1, 3)),
        ["expand_dims", "transpose", "conv", "transpose", "squeeze"],
        fires=False,
    ),
    _case(  # the dummy axis at 2: (B, S, 1, C), the conv runs over (S, 1)
        "conv1d-channels-last-other-axis",
        "compose_conv1d",
        _conv1d_last(axis=2, width=1),
        ["expand_dims", "transpose", "conv", "transpose", "squeeze"],
        fires=False,
    ),
    _case(
        "conv1d-channels-last-input-weight",
        "compose_conv1d",
        _conv1d_last(const_weight=False),
        ["expand_dims", "transpose", "conv", "transpose", "squeeze"],
        fires=False,
    ),
    _case(
        "dequantize-transpose-reshape",
        "merge_affine_dequantize_with_consecutive_ops",
        _moved_weight(
            np.array(0.02, np.float32),
            ("transpose", {"perm": [1, 0]}),
            ("reshape", {"shape": [1, 6, 4]}),
        ),
        ["constexpr_affine_dequantize", "mul"],
        prelude=("dequantize_to_constexpr",),
    ),
    _case(
        "dequantize-per-channel-transpose",
        "merge_affine_dequantize_with_consecutive_ops",
        _moved_weight(values(6, low=0.01, high=0.03), ("transpose", {"perm": [1, 0]})),
        ["constexpr_affine_dequantize", "mul"],
        prelude=("dequantize_to_constexpr",),
    ),
    _case(
        "dequantize-per-channel-reshape",
        "merge_affine_dequantize_with_consecutive_ops",
        _moved_weight(
            values(6, low=0.01, high=0.03),
            ("transpose", {"perm": [1, 0]}),
            ("reshape", {"shape": [1, 6, 4]}),
        ),
        ["constexpr_affine_dequantize", "reshape", "mul"],
        prelude=("dequantize_to_constexpr",),
    ),
    _case(
        "dequantize-shared",
        "merge_affine_dequantize_with_consecutive_ops",
        _moved_weight(np.array(0.02, np.float32), ("transpose", {"perm": [1, 0]}), shared=True),
        ["constexpr_affine_dequantize", "transpose", "mul"],
        fires=False,
        prelude=("dequantize_to_constexpr",),
    ),
    _case("conv-batchnorm", "fuse_conv_batchnorm", _conv_batchnorm(), ["conv"]),
    _case(
        "conv-transpose-batchnorm",
        "fuse_conv_batchnorm",
        _conv_batchnorm(transpose_groups=1),
        ["conv_transpose"],
    ),
    _case(
        "conv-transpose-groups-batchnorm",
        "fuse_conv_batchnorm",
        _conv_batchnorm(transpose_groups=2),
        ["conv_transpose"],
    ),
    _case(
        "conv-batchnorm-shared",
        "fuse_conv_batchnorm",
        _conv_batchnorm(shared=True),
        ["conv", "batch_norm"],
        fires=False,
    ),
    _case(
        "layernorm",
        "fuse_layernorm_or_instancenorm",
        _norm([-1], values(3), values(3)),
        ["layer_norm"],
    ),
    _case(
        "layernorm-plain",
        "fuse_layernorm_or_instancenorm",
        _norm([1, 2, 3], None, None, root="sqrt"),
        ["layer_norm"],
    ),
    _case(
        "instancenorm",
        "fuse_layernorm_or_instancenorm",
        _norm([2, 3], values(1, C, 1, 1), values(C, 1, 1)),
        ["instance_norm"],
    ),
    _case(
        "layernorm-axes-differ",
        "fuse_layernorm_or_instancenorm",
        _norm([-1], None, None, second_axes=[-2]),
        ["reduce_mean", "sub", "square", "reduce_mean", "add", "rsqrt", "mul"],
        fires=False,
    ),
    _case(
        "layernorm-shared",
        "fuse_layernorm_or_instancenorm",
        _norm([-1], None, None, shared=True),
        ["reduce_mean", "sub", "square", "reduce_mean", "add", "rsqrt", "mul"],
        fires=False,
    ),
    _case(
        "layernorm-gamma-elsewhere",
        "fuse_layernorm_or_instancenorm",
        _norm([-1], values(1, C, 1, 1), None),
        ["reduce_mean", "sub", "square", "reduce_mean", "add", "rsqrt", "mul", "mul"],
        fires=False,
    ),
    _case(
        "instancenorm-pattern-2", "fuse_layernorm_or_instancenorm", _norm_twice(), ["instance_norm"]
    ),
    _case(
        "instancenorm-pattern-2-power",
        "fuse_layernorm_or_instancenorm",
        _norm_twice(power=0.25),
        [
            "reduce_mean",
            "sub",
            "sub",
            "square",
            "reduce_mean",
            "add",
            "pow",
            "real_div",
            "mul",
            "add",
        ],
        fires=False,
    ),
    _case(
        "instancenorm-pattern-3",
        "fuse_layernorm_or_instancenorm",
        _norm_shifted(),
        ["instance_norm"],
    ),
    _case(
        "instancenorm-pattern-3-minus-two",
        "fuse_layernorm_or_instancenorm",
        _norm_shifted(minus=-2.0),
        ["reduce_mean", "sub", "square", "reduce_mean", "add", "rsqrt", "mul", "mul", "mul", "add"],
        fires=False,
    ),
    _case(
        "instancenorm-pattern-4",
        "fuse_layernorm_or_instancenorm",
        _norm_moments(),
        ["instance_norm"],
    ),
    _case(
        "instancenorm-pattern-4-count",
        "fuse_layernorm_or_instancenorm",
        _norm_moments(count=5),
        [
            "reduce_sum",
            "mul",
            "mul",
            "reduce_sum",
            "mul",
            "mul",
            "sub",
            "add",
            "rsqrt",
            "mul",
            "mul",
            "mul",
            "sub",
            "add",
        ],
        fires=False,
    ),
    _case(
        "instancenorm-pattern-4-shared",
        "fuse_layernorm_or_instancenorm",
        _norm_moments(shared=True),
        [
            "reduce_sum",
            "mul",
            "mul",
            "reduce_sum",
            "mul",
            "mul",
            "sub",
            "add",
            "rsqrt",
            "mul",
            "mul",
            "mul",
            "sub",
            "add",
        ],
        fires=False,
    ),
    _case("layernorm-pattern-5", "fuse_layernorm_or_instancenorm", _norm_bc1s(), ["layer_norm"]),
    _case(
        "layernorm-pattern-5-gamma-spatial",
        "fuse_layernorm_or_instancenorm",
        _norm_bc1s(gamma_shape=(1, 1, 2, 3)),
        ["reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul", "add", "mul"],
        fires=False,
    ),
    _case("matmul-bias", "fuse_matmul_weight_bias", _matmul_bias(), ["linear"]),
    _case(
        "matmul-bias-sub", "fuse_matmul_weight_bias", _matmul_bias("sub", first=True), ["linear"]
    ),
    _case(
        "matmul-bias-rows",
        "fuse_matmul_weight_bias",
        _matmul_bias(bias_shape=(8, 1)),
        ["matmul", "add"],
        fires=False,
    ),
    _case(
        "matmul-bias-input",
        "fuse_matmul_weight_bias",
        _matmul_bias(const_weight=False),
        ["matmul", "add"],
        fires=False,
    ),
    _case("linear-bias", "fuse_linear_bias", _linear_bias(), ["linear"]),
    _case("linear-bias-sub", "fuse_linear_bias", _linear_bias("sub", first=True), ["linear"]),
    _case(
        "linear-bias-rows",
        "fuse_linear_bias",
        _linear_bias(bias_shape=(8, 1)),
        ["linear", "add"],
        fires=False,
    ),
    _case(
        "paddings",
        "merge_consecutive_paddings",
        _paddings({"pad": [1, 1], "mode": "reflect"}, {"pad": [1, 1, 0, 0], "mode": "reflect"}),
        ["pad"],
    ),
    _case(
        "paddings-constant",
        "merge_consecutive_paddings",
        _paddings({"pad": [1, 2], "constant_val": 0.5}, {"pad": [3, 1], "constant_val": 0.5}),
        ["pad"],
    ),
    _case(
        "paddings-same-axis",
        "merge_consecutive_paddings",
        _paddings({"pad": [1, 1], "mode": "reflect"}, {"pad": [1, 1], "mode": "reflect"}),
        ["pad", "pad"],
        fires=False,
    ),
    _case(
        "paddings-values",
        "merge_consecutive_paddings",
        _paddings({"pad": [1, 2], "constant_val": 0.5}, {"pad": [3, 1], "constant_val": 0.25}),
        ["pad", "pad"],
        fires=False,
    ),
    _case("pad-conv", "fuse_pad_conv", _pad_conv(), ["conv"]),
    _case("pad-transpose-conv", "fuse_pad_conv", _pad_conv(transpose=True), ["transpose", "conv"]),
    _case("pad-conv-value", "fuse_pad_conv", _pad_conv(value=1.0), ["pad", "conv"], fires=False),
    _case(
        "pad-conv-channels",
        "fuse_pad_conv",
        _pad_conv(pad=(1, 0, 0, 0, 1, 1, 0, 0)),
        ["pad", "conv"],
        fires=False,
    ),
    _case(
        "dequantize-const",
        "dequantize_to_constexpr",
        _dequantize_const(),
        ["constexpr_affine_dequantize", "add"],
    ),
    _case(
        "dequantize-input",
        "dequantize_to_constexpr",
        _dequantize_const(input_const=False),
        ["quantize", "dequantize", "add"],
        fires=False,
    ),
    _case(
        "requantize",
        "dequantize_quantize_pair_elimination",
        _requantized(),
        ["quantize", "dequantize"],
    ),
    _case(
        "requantize-shared",
        "dequantize_quantize_pair_elimination",
        _requantized(shared=True),
        ["quantize", "dequantize", "dequantize"],
    ),
    _case(
        "requantize-scale",
        "dequantize_quantize_pair_elimination",
        _requantized(scale=0.025),
        ["quantize", "dequantize", "quantize", "dequantize"],
        fires=False,
    ),
    # the seed's quantized reshape: dequantize -> reshape -> quantize becomes a reshape of the
    # integers (x quantized first, the result dequantized after: a graph's inputs and outputs
    # here are floats)
    _case("int-reshape", "int_op_canonicalization", _quantized_reshape(), QRESHAPED),
    _case(
        "int-reshape-uint8", "int_op_canonicalization", _quantized_reshape(dtype="uint8"), QRESHAPED
    ),
    _case(  # the dequantize read elsewhere too stays for its other reader
        "int-reshape-dequantize-shared",
        "int_op_canonicalization",
        _quantized_reshape(shared="dq"),
        ["quantize", "dequantize", "reshape", "dequantize"],
    ),
    _case(  # the float reshape read elsewhere too: it stays, and so does its quantize
        "int-reshape-shared",
        "int_op_canonicalization",
        _quantized_reshape(shared="r"),
        QUANTIZED_RESHAPE,
        fires=False,
    ),
    _case(  # requantized to another scale: the float path is what it computes
        "int-reshape-scale",
        "int_op_canonicalization",
        _quantized_reshape(scale=0.03),
        QUANTIZED_RESHAPE,
        fires=False,
    ),
    # the seed's passes whose primitives came, the second set
    _case(
        "select-true",
        "select_optimization",
        _select(np.ones((1, C, 1, 1), bool)),
        ["relu", "sigmoid"],
    ),
    _case(
        "select-finite",
        "select_optimization",
        _select(RNG_Q.integers(0, 2, (1, 1, 2, 3)).astype(bool), np.array([-3.0], np.float32)),
        ["sigmoid", "select"],
        fires=False,
    ),
    _case(
        "select-mixed",
        "select_optimization",
        _select(np.array([True, False, True, True]).reshape(1, C, 1, 1)),
        ["relu", "sigmoid", "select"],
        fires=False,
    ),
    _case("scale-shift", "fuse_elementwise_to_batchnorm", _scale_shift(), ["batch_norm"]),
    _case(
        "scale-shift-chw",
        "fuse_elementwise_to_batchnorm",
        _scale_shift((C, 1, 1)),
        ["mul", "add"],
        fires=False,
    ),
    _case(
        "conv-transpose-shape",
        "add_conv_transpose_output_shape",
        _conv_transpose(),
        ["conv_transpose"],
    ),
    _case(
        "conv-transpose-shape-given",
        "add_conv_transpose_output_shape",
        _conv_transpose(output_shape=True),
        ["conv_transpose"],
        fires=False,
    ),
    _case(
        "zero-point-0",
        "nullify_redundant_quantization_zero_point",
        _zero_points(0),
        ["quantize", "dequantize", "add"],
    ),
    _case(
        "zero-point-pair",
        "nullify_redundant_quantization_zero_point",
        _zero_points(-128),
        ["quantize", "dequantize", "add"],
    ),
    _case(
        "zero-point-const",
        "nullify_redundant_quantization_zero_point",
        _zero_points(128, "uint8", const_input=True),
        ["dequantize", "add"],
    ),
    _case(
        "zero-point-other",
        "nullify_redundant_quantization_zero_point",
        _zero_points(3),
        ["quantize", "dequantize", "add"],
        fires=False,
    ),
    _case("stack-after", "replace_stack_reshape", _stack_reshape(1, [1, 10, 3, 4]), ["concat"]),
    _case("stack-before", "replace_stack_reshape", _stack_reshape(2, [1, 10, 3, 4]), ["concat"]),
    _case(
        "stack-elsewhere",
        "replace_stack_reshape",
        _stack_reshape(2, [1, 5, 24]),
        ["stack", "reshape"],
        fires=False,
    ),
    _case("reflection", "use_reflection_padding", _reflection(), ["relu", "pad"]),
    _case("reflection-2-1", "use_reflection_padding", _reflection(2, 1), ["relu", "pad"]),
    _case(
        "reflection-shifted",
        "use_reflection_padding",
        _reflection(1, 1, shift=1),
        ["relu", "slice_by_index", "slice_by_index", "concat"],
        fires=False,
    ),
    _case(
        "pixel-shuffle", "concat_to_pixel_shuffle", _up_convolution(), ["concat", "pixel_shuffle"]
    ),
    _case(
        "pixel-shuffle-axis",
        "concat_to_pixel_shuffle",
        _up_convolution(outer_axis=2),
        ["concat", "concat", "concat"],
        fires=False,
    ),
    _case(
        "quantized-add",
        "distributive_quantized_binary_op_scale_normalization",
        _quantized_add(),
        ["quantize", "dequantize", "quantize", "dequantize", "add", "quantize", "dequantize"],
    ),
    _case(
        "quantized-add-shared",
        "distributive_quantized_binary_op_scale_normalization",
        _quantized_add(shared=True),
        ["quantize", "dequantize", "quantize", "dequantize", "add", "quantize", "dequantize"],
        fires=False,
    ),
    # beyond the seed: the ANE's passes
    _case("matmul-conv", "matmul_to_conv", _token_major_matmul(), ["conv"]),
    _case("matmul-conv-no-bias", "matmul_to_conv", _token_major_matmul(bias=False), ["conv"]),
    _case(
        "matmul-conv-rank3",
        "matmul_to_conv",
        _token_major_matmul(rank3=True),
        ["expand_dims", "conv", "squeeze"],
    ),
    _case(
        "matmul-conv-rank3-shared",
        "matmul_to_conv",
        _token_major_matmul(rank3=True, shared=True),
        ["transpose", "matmul", "add", "transpose"],
        fires=False,
    ),
    _case(
        "matmul-conv-not-back",
        "matmul_to_conv",
        _token_major_matmul(back=[0, 3, 2, 1]),
        ["transpose", "matmul", "add", "transpose"],
        fires=False,
    ),
    _case(
        "matmul-conv-input-weight",
        "matmul_to_conv",
        _token_major_matmul(const_weight=False),
        ["transpose", "matmul", "add", "transpose"],
        fires=False,
    ),
    _case(
        "matmul-conv-shared",
        "matmul_to_conv",
        _token_major_matmul(shared=True),
        ["transpose", "matmul", "add", "transpose"],
        fires=False,
    ),
    _case(
        "expand-depth-to-space",
        "expand_high_rank_reshape_and_transpose",
        _rank6(D2S),
        ["reshape", "transpose", "reshape", "transpose", "reshape"],
    ),
    _case(
        "expand-reversed",
        "expand_high_rank_reshape_and_transpose",
        _rank6([5, 4, 3, 2, 1, 0], back=[3, 4, 2, 2]),
        [*["reshape", "transpose"] * 4, "reshape"],  # four steps of rank 4
    ),
    _case(
        "expand-folds-to-rank-3",
        "expand_high_rank_reshape_and_transpose",
        _rank6([0, 1, 4, 5, 2, 3], back=[1, 2, 6, 4]),
        ["reshape", "transpose", "reshape"],
    ),
    _case(
        "expand-shared",
        "expand_high_rank_reshape_and_transpose",
        _rank6(D2S, shared=True),
        ["reshape", "transpose", "reshape"],
        fires=False,
    ),
    _case(
        "expand-back-to-rank-6",
        "expand_high_rank_reshape_and_transpose",
        _rank6(D2S, back=[1, 2, 2, 2, 2, 3]),
        ["reshape", "transpose", "reshape"],
        fires=False,
    ),
    _case(
        "expand-not-reshaped",
        "expand_high_rank_reshape_and_transpose",
        _rank6(D2S, after="relu"),
        ["reshape", "transpose", "relu"],
        fires=False,
    ),
    _case(
        "expand-rank-5",
        "expand_high_rank_reshape_and_transpose",
        _rank6([0, 3, 1, 4, 2], split=[1, 4, 2, 2, 3], back=[1, 8, 2, 3]),
        ["reshape", "transpose", "reshape"],
        fires=False,
    ),
    _case(
        "fold-shuffle",
        "fold_high_rank",
        _rank5([0, 2, 1, 3, 4]),
        ["reshape", "transpose", "reshape"],
    ),
    _case(
        "fold-through-ops",
        "fold_high_rank",
        _rank5([0, 1, 2, 4, 3], ["relu", "mul"]),
        ["reshape", "transpose", "relu", "mul", "reshape"],
    ),
    _case(
        "fold-reversed",
        "fold_high_rank",
        _rank5([4, 3, 2, 1, 0]),
        ["reshape", "transpose", "reshape"],
        fires=False,
    ),
    _case(
        "fold-tensor-operand",
        "fold_high_rank",
        _rank5([0, 2, 1, 3, 4], ["mul"], values(1, 2, 2, 1, 1)),
        ["reshape", "transpose", "mul", "reshape"],
        fires=False,
    ),
]


def _passes(case: Case) -> Any:
    if not case.options:
        return [*case.prelude, case.graph_pass]
    return {"pipeline": [case.graph_pass], "options": {case.graph_pass: case.options}}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_seed_example_and_its_edges(case: Case):
    built = build(case.body, case.weights, _passes(case))
    assert kinds(built.program) == case.after
    assert changed_by(built) == [*case.prelude, *([case.graph_pass] if case.fires else [])]
    assert_agrees(built)
    assert_agrees(build(case.body, case.weights, "default"))


def test_every_implemented_pass_has_a_seed_case():
    from app.passes import PASSES

    ir_only = {
        "fuse_onehot_matmul_to_gather",  # indices in range: test_fuse_onehot_matmul_to_gather
        "dead_code_elimination",
        "dedup_op_and_var_names",
        "topological_reorder",
        "canonicalize_inplace_pattern",
        "prefer_state_in_downstream",  # tests/test_passes_state.py: states are not graph nodes
        "rank0_expand_dims_swap",
    }
    assert {c.graph_pass for c in CASES} | ir_only == set(PASSES)  # the ANE's passes too
    assert {c.graph_pass for c in CASES if c.fires} | ir_only == set(PASSES)
    assert {c.graph_pass for c in CASES if not c.fires} | ir_only == set(PASSES)  # an edge each


def test_const_threshold_is_the_seed_option():
    body, weights = _dedup(8)
    small = build(
        body,
        weights,
        {
            "pipeline": "const_deduplication",
            "options": {"const_deduplication": {"const_threshold": 8}},
        },
    )
    assert (
        kinds(small.program, consts=True).count("const")
        == kinds(build(body, weights, "none").program, consts=True).count("const") - 2
    )


def test_skip_const_by_size_leaves_larger_results_computed():
    body, weights = _folded(True)
    options = {
        "pipeline": ["const_elimination"],
        "options": {"const_elimination": {"skip_const_by_size": 3}},
    }
    assert kinds(build(body, weights, options).program) == ["exp", "mul"]


# -- examples a graph request cannot hold: built on the IR ------------------------------------------
def _run(program, *names: str):
    return run_pipeline(program, resolve(parse_passes(list(names))))


def test_dead_code_elimination_the_seed_example():
    """The seed: a matmul nobody reads, with its two flag consts, goes; the live ops stay."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (2, 4))
    w = b.const("const_2", values(4, 2), DType.FP16)
    bias = b.const("const_3", values(2), DType.FP16)
    b.op("matmul", "matmul_0", x=x, y=w, transpose_x=False, transpose_y=False)
    live = b.op("matmul", "live", x=x, y=w)
    y = b.op("add", "linear_0", x=live, y=bias)
    program = b.build([y])
    after, report = _run(program, "dead_code_elimination")
    assert [(op.type, op.name) for op in after.main.operations] == [
        ("const", "const_2"),
        ("const", "const_3"),
        ("matmul", "live"),
        ("add", "linear_0"),
    ]
    removed = report.changes[0].removed
    assert sorted(removed) == sorted(
        [
            ("matmul", "matmul_0"),
            ("const", "matmul_0_transpose_x"),
            ("const", "matmul_0_transpose_y"),
        ]
    )


def test_dead_code_elimination_keeps_a_state_write():
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    cache = b.state("cache", DType.FP16, (1, 4))
    b.op_outputs("write_state", "keep", input=cache, data=x)
    y = b.op("relu", "y", x=x)
    program = b.build([y])
    after, report = _run(program, "dead_code_elimination")
    assert "write_state" in [op.type for op in after.main.operations] and not report.changes


def test_a_fused_linear_holds_the_matmuls_weight_transposed_not_a_copy_of_it():
    """fuse_matmul_weight_bias: the linear's weight is a view of the matmul's fp16 const (the
    program as built keeps that const, so a copy would hold the weight twice), with the values
    a copy would hold; c - matmul negates it, a new array."""
    for op in ("add", "sub"):
        b = Builder("ios18")
        x = b.input("x", DType.FP16, (2, 4))
        weight = values(4, 3).astype(np.float16)
        w = b.const("w", weight, DType.FP16)
        bias = b.const("b", values(3).astype(np.float16), DType.FP16)
        product = b.op("matmul", "mm", x=x, y=w)
        y = b.op(
            op, "y", **({"x": product, "y": bias} if op == "add" else {"x": bias, "y": product})
        )
        after, _report = _run(b.build([y]), "fuse_matmul_weight_bias")
        (linear,) = [o for o in after.main.operations if o.type == "linear"]
        held = linear.var("weight").op.value.stored()  # type: ignore[union-attr]
        np.testing.assert_array_equal(held, weight.T if op == "add" else -weight.T)
        assert np.shares_memory(held, weight) == (op == "add")


def test_dedup_op_and_var_names_the_seed_example():
    """Two casts named castop: the second becomes castop_1; the output keeps its name."""
    b = Builder("ios18")
    x = b.input("x", DType.FP32, (2, 4))
    first = b.op("cast", "castop", x=x, dtype="fp16")
    second = b.op("cast", "castop2", x=first, dtype="fp32")
    y = b.op("square", "square_last", x=second)
    program = b.build([y])
    second.op.name = "castop"  # type: ignore[union-attr]  # what an importer may produce
    second.name = "castop"
    after, _report = _run(program, "dedup_op_and_var_names")
    named = [op.name for op in after.main.operations if op.type != "const"]
    assert named == ["castop", "castop_1", "square_last"]
    assert [v.name for v in after.main.outputs] == ["square_last"]
    inputs = random_inputs(program.main, 0)
    assert np.array_equal(
        Executor(after).run(inputs).outputs["square_last"],
        Executor(program).run(inputs).outputs["square_last"],
    )


def _reorder_example():
    """The seed's program: x cast to fp16, then square/log/relu branches with transposes and
    casts (log as exp)."""
    nodes = [
        node("x0", "cast", {"x": "x"}, dtype="fp16"),
        node("x1", "square", {"x": "x0"}),
        node("x1_t", "transpose", {"x": "x1"}, perm=[1, 0]),
        node("x2", "cast", {"x": "x1_t"}, dtype="fp32"),
        node("x3", "exp", {"x": "x0"}),
        node("x3_t", "transpose", {"x": "x3"}, perm=[1, 0]),
        node("x4", "cast", {"x": "x3_t"}, dtype="fp32"),
        node("x5", "relu", {"x": "x0"}),
        node("x6", "cast", {"x": "x5"}, dtype="fp32"),
        node("x7", "relu", {"x": "x6"}),
        node("x8", "relu", {"x": "x0"}),
    ]
    return graph(nodes, {"y2": "x2", "y4": "x4", "y7": "x7", "y8": "x8"}, x=([2, 4], "fp32"))


def test_topological_reorder_the_seed_example():
    built = build(_reorder_example(), {}, ["topological_reorder"])
    named = [op.name for op in built.program.main.operations if op.type != "const"]
    # the seed's final order (x2, x4, x7, x8 are the outputs y2, y4, y7, y8)
    assert named == ["x0", "x1", "x3", "x5", "x6", "x7", "x8", "x3_t", "x4", "x1_t", "x2"]
    assert changed_by(built) == ["topological_reorder"]
    assert built.passes.changes[0].reordered and not built.passes.changes[0].removed
    assert_agrees(built)
    assert_agrees(build(_reorder_example(), {}, "default"))


def test_topological_reorder_leaves_other_ops_where_they_are():
    body = graph(
        [
            node("a", "relu", {"x": "x"}),
            node("b", "exp", {"x": "x"}),
            node("y", "add", {"x": "a", "y": "b"}),
        ],
        {"out": "y"},
    )
    assert changed_by(build(body, {}, ["topological_reorder"])) == []


def test_add_fp16_cast_leaves_an_op_with_a_constant_beyond_fp16():
    """A graph's weights are held to fp16's range; a program from elsewhere may hold more."""
    b = Builder("ios18")
    x = b.input("x", DType.FP32, (2, 5))
    y = b.op("mul", "y", x=x, y=b.const("big", np.array([1e5], np.float32), DType.FP32))
    after, report = _run(b.build([y]), "add_fp16_cast")
    assert [op.type for op in after.main.operations] == ["const", "mul"] and not report.changes


def _inplace(read_between: bool):
    """read_state -> mul -> add, the write of the mul's result listed after the add."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    state = b.state("state", DType.FP16, (1, 4))
    held = b.op("read_state", "held", input=state)
    mul = b.op("mul", "mul", x=held, y=x)
    add = b.op("add", "add", x=mul, y=x)
    if read_between:
        add = b.op("add", "again", x=add, y=b.op("read_state", "peek", input=state))
    b.op_outputs("write_state", "update", input=state, data=mul)
    return b.build([add])


def test_canonicalize_inplace_pattern_the_seed_example():
    after, report = _run(_inplace(False), "canonicalize_inplace_pattern")
    assert [op.name for op in after.main.operations] == ["held", "mul", "update", "add"]
    assert report.changes[0].reordered
    inputs = random_inputs(after.main, 0)
    for program in (_inplace(False), after):  # the same output and the same state after
        run = Executor(program)
        out = run.run(inputs).outputs["add"]
        assert np.array_equal(out, Executor(_inplace(False)).run(inputs).outputs["add"])


def test_canonicalize_inplace_pattern_keeps_a_read_of_the_state_before_the_write():
    program = _inplace(True)
    after, report = _run(program, "canonicalize_inplace_pattern")
    assert not report.changes
    assert [op.name for op in after.main.operations] == [op.name for op in program.main.operations]


def _rank0_program(const_shape: tuple[int, ...] = (), other_reader: bool = True):
    """The seed's rank-0 sub (a value minus a scalar const) then expand_dims(axes=[0]), its
    result read by another op too. (A graph's weights are at least rank 1: the IR is built.)"""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (2, 3))
    total = b.op("reduce_sum", "total", x=x)
    centred = b.op(
        "sub", "centred", x=total, y=b.const("half", np.full(const_shape, 0.5), DType.FP16)
    )
    outputs = [b.op("expand_dims", "y", x=centred, axes=[0])]
    if other_reader:
        outputs.append(b.op("mul", "op2", x=centred, y=total))
    return b.build(outputs)


@pytest.mark.parametrize(
    ("program", "after"),
    [
        (_rank0_program(), ["reduce_sum", "expand_dims", "sub", "squeeze", "mul"]),
        (_rank0_program(other_reader=False), ["reduce_sum", "expand_dims", "sub"]),
        (_rank0_program((1,)), ["reduce_sum", "sub", "expand_dims", "mul"]),  # not rank 0
    ],
    ids=["seed", "alone", "vector"],
)
def test_rank0_expand_dims_swap_the_seed_example(program, after):
    swapped, report = _run(program, "rank0_expand_dims_swap")
    assert [op.type for op in swapped.main.operations if op.type != "const"] == after
    assert bool(report.changes) == (after != ["reduce_sum", "sub", "expand_dims", "mul"])
    assert [v.type for v in swapped.main.outputs] == [v.type for v in program.main.outputs]
    inputs = random_inputs(program.main, 0)
    want, got = Executor(program).run(inputs).outputs, Executor(swapped).run(inputs).outputs
    assert all(np.array_equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.graph_pass == "fold_high_rank"], ids=lambda c: c.id
)
def test_fold_high_rank_leaves_no_rank_5_tensor_where_it_fires(case):
    built = build(case.body, case.weights, [case.graph_pass])
    ranks = {v.tensor.rank for op in built.program.main.operations for v in op.outputs}
    assert (max(ranks) <= 4) == case.fires


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.graph_pass == "expand_high_rank_reshape_and_transpose"],
    ids=lambda c: c.id,
)
def test_expand_high_rank_reshape_and_transpose_leaves_rank_4_at_most_where_it_fires(case):
    built = build(case.body, case.weights, [case.graph_pass])
    ranks = {v.tensor.rank for op in built.program.main.operations for v in op.outputs}
    assert (max(ranks) <= 4) == case.fires


@pytest.mark.parametrize("infinite", ["a", "b", "neither"])
def test_select_optimization_a_mask_of_infinities_becomes_an_add(infinite):
    """select(cond, -inf, x) (an attention mask, as an import writes it; a graph request's weights
    are finite, so built on the IR): the mask select(cond, -inf, 0) computed, then added."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4, 2, 3))
    scores = b.op("relu", "scores", x=x)
    cond = b.const("cond", RNG_Q.integers(0, 2, (1, 1, 2, 3)).astype(bool), DType.BOOL)
    fill = b.const("fill", np.array([-np.inf if infinite != "neither" else -3.0]), DType.FP16)
    operands = {"a": fill, "b": scores} if infinite != "b" else {"a": scores, "b": fill}
    program = b.build([b.op("select", "masked", cond=cond, **operands)])
    after, report = _run(program, "select_optimization")
    kinds_after = [op.type for op in after.main.operations if op.type != "const"]
    assert kinds_after == (["relu", "select"] if infinite == "neither" else ["relu", "add"])
    assert bool(report.changes) == (infinite != "neither")
    inputs = random_inputs(program.main, 0)
    want = Executor(program).run(inputs).outputs["masked"]
    got = Executor(after).run(inputs).outputs["masked"]
    assert np.array_equal(want, got)


@pytest.mark.parametrize(("on", "fires"), [(1.0, True), (2.0, False)])
def test_fuse_onehot_matmul_to_gather_the_seed_example(on, fires):
    """one_hot(i) · W is gather(W, i) for indices in range (one_hot of an index out of range is a
    row of zeros: the default pipeline leaves the pass out)."""
    body, weights = _onehot_matmul(on=on)
    built = build(body, weights, ["fuse_onehot_matmul_to_gather"])
    assert kinds(built.program) == (["gather"] if fires else ["one_hot", "matmul"])
    assert changed_by(built) == (["fuse_onehot_matmul_to_gather"] if fires else [])
    inputs = {"i": np.array([[0, 4, 2], [1, 1, 3]], np.int32)}
    want = Executor(built.built_program).run(inputs).outputs["out"]
    got = Executor.from_written_weights(built.program).run(inputs).outputs["out"]
    np.testing.assert_allclose(got, want, rtol=2**-10)
    assert "fuse_onehot_matmul_to_gather" not in DEFAULT


def _quantized_reshape_ir(target: str = "ios18", zero: int = 0, dtype=DType.INT8):
    """x -> quantize -> dequantize -> reshape -> quantize (zero point `zero`) -> its integers, on
    the IR: a scalar zero point of the integer dtype (a graph's weights are vectors)."""
    b = Builder(target)
    x = b.input("x", DType.FP16, (1, 4, 2, 3))
    kind, ints = ("int8", np.int8) if dtype is DType.INT8 else ("uint8", np.uint8)
    scale = b.const("scale", np.float16(0.025))
    q = b.op("quantize", "q", input=x, scale=scale, output_dtype=b.const("kind", kind))
    dq = b.op("dequantize", "dq", input=q, scale=scale)
    r = b.op("reshape", "r", x=dq, shape=b.const("shape", np.array([1, 4, 6], np.int32)))
    zp = {"zero_point": b.const("zp", ints(zero), dtype)} if zero else {}
    q2 = b.op("quantize", "q2", input=r, scale=scale, output_dtype=b.const("kind2", kind), **zp)
    return b.build([q2])


def test_int_op_canonicalization_keeps_every_integer():
    """The rewrite is exact: the reshaped integers are the ones quantized again."""
    program = _quantized_reshape_ir()
    after, report = _run(program, "int_op_canonicalization")
    assert [op.type for op in after.main.operations if op.type != "const"] == [
        "quantize",
        "reshape",
    ]
    assert [c.graph_pass for c in report.changes] == ["int_op_canonicalization"]
    assert after.main.outputs[0].name == "q2" and after.main.outputs[0].tensor.dtype is DType.INT8
    inputs = random_inputs(program.main, 0)
    want = Executor(program).run(inputs).outputs["q2"]
    assert np.array_equal(Executor(after).run(inputs).outputs["q2"], want)


def test_int_op_canonicalization_keeps_another_zero_point():
    program = _quantized_reshape_ir(zero=3)
    after, report = _run(program, "int_op_canonicalization")
    assert not report.changes
    assert [op.type for op in after.main.operations] == [op.type for op in program.main.operations]


def test_int_op_canonicalization_waits_for_ios17s_reshape():
    """Before iOS17 a reshape takes no int8 (its record's earlier form, coremltools iOS15's): a
    program of an older opset keeps its float reshape."""
    from app.language.targets import ALL_TARGETS
    from app.mil.ir import Program
    from app.passes.edit import copy_program

    built = copy_program(_quantized_reshape_ir("ios17"))
    older = Program(ALL_TARGETS["ios16"], built.functions, built.default)
    assert _run(built, "int_op_canonicalization")[1].changes
    after, report = _run(older, "int_op_canonicalization")
    assert not report.changes and "quantize" in [op.type for op in after.main.operations[-2:]]
