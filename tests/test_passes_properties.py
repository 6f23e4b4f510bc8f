"""Each pass's pattern and one of its near-misses planted side by side in a random program
(Hypothesis draws the shapes, the ops around them and which variant of each): the pass alone
rewrites the planted pattern in every draw and leaves the near-miss as it is, and the program
computes what it computed before within the graph's fp16 tolerance, after the pass alone and
after the default pipeline.

The program: x -> a random chain of elementwise ops -> a barrier (x times it: nothing fuses
across a product of two inputs) -> the planted pattern and the near-miss, each followed by a
random unary op and exported as an output. A pass that fires everywhere would show in the
near-miss; one that never fires, in the planted pattern."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.mil import Builder, DType
from app.passes import PASSES, parse_passes, resolve, run_pipeline
from app.reference.executor import Executor, random_inputs
from tests.graph_passes import assert_agrees, build, node

# Thirty draws a pass, about a second on the idle 2-core machine: the file stays near 30 s.
settings.register_profile(
    "passes",
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same draws every run: a failure here is reproducible as it is
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("passes")

UNARY = ["relu", "tanh", "sigmoid", "abs"]


@dataclass
class Site:
    """A planted pattern or a near-miss: its nodes and weights, what it exports, and the node
    ids the pass must rewrite (planted) or leave as they are (near-miss)."""

    nodes: list[dict]
    weights: dict
    out: str
    marks: list[str]
    also: dict | None = None  # further outputs (a shared intermediate)


@dataclass
class Shape:
    c: int
    h: int
    w: int

    @property
    def full(self) -> tuple[int, int, int, int]:
        return (1, self.c, self.h, self.w)


def _w(*shape: int, low: float = -1.0, high: float = 1.0, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


# -- planters: (draw, prefix of ids, input ref, shape, near) -> Site -----------------------------
def _dedup(d, p, src, s, near):
    a = _w(*s.full, seed=d.draw(st.integers(0, 9)))
    other = a + 0.5 if near else a
    nodes = [
        node(f"{p}m1", "mul", {"x": src}),
        node(f"{p}m2", "mul", {"x": src}),
        node(f"{p}s", "add", {"x": f"{p}m1", "y": f"{p}m2"}),
    ]
    return Site(nodes, {f"{p}m1.y": a, f"{p}m2.y": other}, f"{p}s", [f"{p}m2_y"])


def _fold(d, p, src, s, near):
    first = node(
        f"{p}c", d.draw(st.sampled_from(["exp", "tanh", "abs"])), {"x": src} if near else {}
    )
    weights = {} if near else {f"{p}c.x": _w(1, s.c, 1, 1)}
    return Site(
        [first, node(f"{p}m", "mul", {"x": src, "y": f"{p}c"})], weights, f"{p}m", [f"{p}c"]
    )


def _noop(d, p, src, s, near):
    full = list(s.full)
    if near:
        kind = d.draw(st.sampled_from(["add_small", "mul_almost", "reshape_other"]))
    else:
        kind = d.draw(
            st.sampled_from(["add", "sub", "mul", "div", "reshape", "transpose", "tile", "slice"])
        )
    op, params, weights = {
        "add": ("add", {}, np.zeros((1, s.c, 1, 1), np.float32)),
        "sub": ("sub", {}, np.zeros((1,), np.float32)),
        "mul": ("mul", {}, np.ones((1,), np.float32)),
        "div": ("real_div", {}, np.ones((1, s.c, 1, 1), np.float32)),
        "reshape": ("reshape", {"shape": full}, None),
        "transpose": ("transpose", {"perm": [0, 1, 2, 3]}, None),
        "tile": ("tile", {"reps": [1, 1, 1, 1]}, None),
        "slice": ("slice_by_size", {"begin": [0, 0, 0, 0], "size": full}, None),
        "add_small": ("add", {}, np.full((1,), 0.01, np.float32)),
        "mul_almost": ("mul", {}, np.full((1, s.c, 1, 1), 1.01, np.float32)),
        "reshape_other": ("reshape", {"shape": [s.c, s.h * s.w]}, None),
    }[kind]
    n = node(f"{p}n", op, {"x": src}, **params)
    return Site([n], {} if weights is None else {f"{p}n.y": weights}, f"{p}n", [f"{p}n"])


def _redundant(d, p, src, s, near):
    op = d.draw(st.sampled_from(["relu", "tanh", "sigmoid"]))
    if near:
        nodes = [
            node(f"{p}a", "sub", {"x": src, "y": "x"}),
            node(f"{p}b", "sub", {"x": "x", "y": src}),
        ]
    else:
        nodes = [node(f"{p}a", op, {"x": src}), node(f"{p}b", op, {"x": src})]
    nodes.append(node(f"{p}s", "mul", {"x": f"{p}a", "y": f"{p}b"}))
    return Site(nodes, {}, f"{p}s", [f"{p}b"])


def _reduce_mean(d, p, src, s, near):
    axis = d.draw(st.sampled_from([1, 2, 3]))
    n = s.full[axis]
    miss = d.draw(st.sampled_from(["constant", "shared"])) if near else None
    constant = 1 / (n + 1) if miss == "constant" else 1 / n
    nodes = [
        node(f"{p}s", "reduce_sum", {"x": src}, axes=[axis], keep_dims=True),
        node(f"{p}m", "mul", {"x": f"{p}s"}),
    ]
    also = {f"{p}total": f"{p}s"} if miss == "shared" else None
    return Site(nodes, {f"{p}m.y": np.array([constant], np.float32)}, f"{p}m", [f"{p}m"], also)


def _divide(d, p, src, s, near):
    if near:
        return Site([node(f"{p}d", "real_div", {"x": src, "y": "x"})], {}, f"{p}d", [f"{p}d"])
    divisor = _w(1, s.c, 1, 1, low=0.5, high=2.0) * d.draw(st.sampled_from([1, -1]))
    return Site([node(f"{p}d", "real_div", {"x": src})], {f"{p}d.y": divisor}, f"{p}d", [f"{p}d"])


def _conv_then(op_type: str) -> Callable:
    def plant(d, p, src, s, near):
        weights = {f"{p}c.weight": _w(s.c, s.c, 1, 1, seed=d.draw(st.integers(0, 9)))}
        miss = d.draw(st.sampled_from(["spatial", "shared", "input"])) if near else None
        if miss == "spatial" and s.h * s.w == 1:
            miss = "shared"
        second = {"x": f"{p}c"} if miss != "input" else {"x": f"{p}c", "y": "x"}
        nodes = [node(f"{p}c", "mil.conv", {"x": src}), node(f"{p}o", op_type, second)]
        if miss != "input":
            shape = (
                (1, s.c, s.h, s.w)
                if miss == "spatial"
                else d.draw(st.sampled_from([(1, s.c, 1, 1), (s.c, 1, 1), (1,)]))
            )
            weights[f"{p}o.y"] = _w(*shape, low=0.5, high=1.5)
        also = {f"{p}conv": f"{p}c"} if miss == "shared" else None
        return Site(nodes, weights, f"{p}o", [f"{p}o"], also)

    return plant


def _transpose_matmul(d, p, src, s, near):
    nodes = [
        node(f"{p}t", "transpose", {"x": src}, perm=[0, 1, 3, 2]),
        node(f"{p}m", "mil.matmul", {"x": src, "y": f"{p}t"}),
        node(f"{p}z", "mil.matmul", {"x": f"{p}m", "y": src}),
    ]
    also = {f"{p}shared": f"{p}t"} if near else None
    return Site(nodes, {}, f"{p}z", [f"{p}t"], also)


def _casts(d, p, src, s, near):
    middle = "int32" if near else d.draw(st.sampled_from(["fp32", "fp16"]))
    nodes = [
        node(f"{p}a", "cast", {"x": src}, dtype=middle),
        node(f"{p}b", "cast", {"x": f"{p}a"}, dtype="fp16"),
    ]
    return Site(nodes, {}, f"{p}b", [f"{p}b"])


def _relus(d, p, src, s, near):
    count = d.draw(st.integers(2, 3))
    nodes, last = [], src
    for i in range(count):
        if near and i == 1:
            nodes.append(
                node(f"{p}between", d.draw(st.sampled_from(["abs", "sigmoid"])), {"x": last})
            )
            last = f"{p}between"
        nodes.append(node(f"{p}r{i}", "relu", {"x": last}))
        last = f"{p}r{i}"
    return Site(nodes, {}, last, [f"{p}r1"])


def _repeated(op_type: str) -> Callable:
    def plant(d, p, src, s, near):
        if op_type == "reshape":
            middle = d.draw(
                st.sampled_from([[s.c, s.h * s.w], [1, s.c * s.h, s.w], [s.c * s.h * s.w]])
            )
            params = [{"shape": middle}, {"shape": list(s.full)}]
        else:
            first = d.draw(st.permutations([0, 1, 2, 3]))
            second = d.draw(st.permutations([0, 1, 2, 3]))
            params = [{"perm": list(first)}, {"perm": list(second)}]
        nodes = [
            node(f"{p}a", op_type, {"x": src}, **params[0]),
            node(f"{p}b", op_type, {"x": f"{p}a"}, **params[1]),
        ]
        return Site(nodes, {}, f"{p}b", [f"{p}b"], {f"{p}first": f"{p}a"} if near else None)

    return plant


def _reduce_transposes(d, p, src, s, near):
    perm = list(d.draw(st.permutations([0, 1, 2, 3]).filter(lambda q: list(q) != [0, 1, 2, 3])))
    back = [perm.index(i) for i in range(4)]
    if near:  # undone by nothing: a transpose on, not back
        back = list(
            d.draw(
                st.permutations([0, 1, 2, 3]).filter(lambda q: [perm[i] for i in q] != [0, 1, 2, 3])
            )
        )
    between = d.draw(st.lists(st.sampled_from(UNARY), min_size=1, max_size=3))
    nodes, last = [node(f"{p}t", "transpose", {"x": src}, perm=perm)], f"{p}t"
    for i, op in enumerate(between):
        nodes.append(node(f"{p}u{i}", op, {"x": last}))
        last = f"{p}u{i}"
    nodes.append(node(f"{p}back", "transpose", {"x": last}, perm=back))
    return Site(nodes, {}, f"{p}back", [f"{p}t"])


def _fp16(d, p, src, s, near):
    if near:
        # a cast is left as it is (it says which dtype it wants)
        return Site([node(f"{p}n", "cast", {"x": src}, dtype="fp16")], {}, f"{p}n", [f"{p}n"])
    return Site([node(f"{p}n", d.draw(st.sampled_from(UNARY)), {"x": src})], {}, f"{p}n", [f"{p}n"])


def _gelu(d, p, src, s, near):
    pattern = d.draw(st.sampled_from([1, 2]))
    miss = d.draw(st.sampled_from(["constant", "shared"])) if near else None
    cube = d.draw(st.sampled_from(["square_first", "x_first"]))
    nodes = [node(f"{p}sq", "square", {"x": src})]
    if cube == "square_first":
        nodes.append(node(f"{p}cube", "mul", {"x": f"{p}sq", "y": src}))
    else:
        nodes.append(node(f"{p}cube", "mul", {"x": src, "y": f"{p}sq"}))
    nodes += [
        node(f"{p}cubic", "mul", {"x": f"{p}cube"}),
        node(f"{p}inner", "add", {"x": f"{p}cubic", "y": src}),
        node(f"{p}scaled", "mul", {"x": f"{p}inner"}),
        node(f"{p}t", "tanh", {"x": f"{p}scaled"}),
        node(f"{p}one_plus", "add", {"x": f"{p}t"}),
    ]
    if pattern == 1:
        nodes += [
            node(f"{p}half", "mul", {"x": f"{p}one_plus"}),
            node(f"{p}y", "mul", {"x": src, "y": f"{p}half"}),
        ]
    else:
        nodes += [
            node(f"{p}half", "mul", {"x": src}),
            node(f"{p}y", "mul", {"x": f"{p}one_plus", "y": f"{p}half"}),
        ]
    weights = {
        f"{p}cubic.y": np.array([0.04 if miss == "constant" else 0.044715], np.float32),
        f"{p}scaled.y": np.array([math.sqrt(2 / math.pi)], np.float32),
        f"{p}one_plus.y": np.array([1.0], np.float32),
        f"{p}half.y": np.array([0.5], np.float32),
    }
    return Site(
        nodes, weights, f"{p}y", [f"{p}y"], {f"{p}tanh": f"{p}t"} if miss == "shared" else None
    )


def _shuffle(d, p, src, s, near):
    n = d.draw(st.integers(2, 3))
    sources = [node(f"{p}v{i}", UNARY[i], {"x": src}) for i in range(n)]
    miss = d.draw(st.sampled_from(["perm", "shared"])) if near else None
    perm = [0, 2, 1, 4, 3] if miss == "perm" else [0, 2, 1, 3, 4]
    nodes = [
        *sources,
        {
            "id": f"{p}cat",
            "op": "concat",
            "inputs": {"values": [v["id"] for v in sources]},
            "params": {"axis": 1},
        },
        node(f"{p}split", "reshape", {"x": f"{p}cat"}, shape=[1, n, s.c, s.h, s.w]),
        node(f"{p}t", "transpose", {"x": f"{p}split"}, perm=perm),
        node(
            f"{p}y",
            "reshape",
            {"x": f"{p}t"},
            shape=[1, n * s.c, s.h, s.w] if miss != "perm" else [1, n * s.c, s.w, s.h],
        ),
    ]
    return Site(
        nodes, {}, f"{p}y", [f"{p}t"], {f"{p}cat_out": f"{p}cat"} if miss == "shared" else None
    )


# -- the passes whose primitives came after the first pipeline -------------------------------------
def _gelu_exact(d, p, src, s, near):
    pattern = d.draw(st.sampled_from([1, 2, 3]))
    divide = d.draw(st.booleans())
    miss = d.draw(st.sampled_from(["constant", "shared"])) if near else None
    root = 1.5 if miss == "constant" else math.sqrt(2)
    nodes = [
        node(f"{p}d", "real_div" if divide else "mul", {"x": src}),
        node(f"{p}e", "erf", {"x": f"{p}d"}),
        node(f"{p}one_plus", "add", {"x": f"{p}e"}),
    ]
    half = {"x": f"{p}one_plus", "y": src} if pattern == 2 else {"x": src}
    if pattern == 1:
        half = {"x": f"{p}one_plus"}
    nodes.append(node(f"{p}half", "mul", half))
    last = {
        1: {"x": f"{p}half", "y": src},
        2: {"x": f"{p}half"},
        3: {"x": f"{p}one_plus", "y": f"{p}half"},
    }
    nodes.append(node(f"{p}y", "mul", last[pattern]))
    weights = {
        f"{p}d.y": np.array([root if divide else 1 / root], np.float32),
        f"{p}one_plus.y": np.array([1.0], np.float32),
        (f"{p}y.y" if pattern == 2 else f"{p}half.y"): np.array([0.5], np.float32),
    }
    also = {f"{p}erf": f"{p}e"} if miss == "shared" else None
    return Site(nodes, weights, f"{p}y", [f"{p}y"], also)


def _leaky(d, p, src, s, near):
    miss = d.draw(st.sampled_from(["alpha", "shared"])) if near else None
    alpha = (
        d.draw(st.floats(1.25, 3.0) | st.floats(-2.0, -0.25))
        if miss == "alpha"
        else d.draw(st.floats(0.0, 1.0))
    )
    pair = {"x": f"{p}m", "y": src} if d.draw(st.booleans()) else {"x": src, "y": f"{p}m"}
    nodes = [node(f"{p}m", "mul", {"x": src}), node(f"{p}y", "maximum", pair)]
    also = {f"{p}scaled": f"{p}m"} if miss == "shared" else None
    return Site(nodes, {f"{p}m.y": np.array([alpha], np.float32)}, f"{p}y", [f"{p}m"], also)


def _prelu(d, p, src, s, near):
    last = d.draw(st.booleans())  # the seed's pattern 2: channels last through a transpose
    miss = (
        d.draw(st.sampled_from(["minus", "spatial", *(["shared"] if last else [])]))
        if near
        else None
    )
    # channels last, axis 1 is H: pattern 1 would take a scale along it (a prelu of the NHWC
    # tensor), so the near-miss varies along W
    if miss == "spatial" and (s.w if last else s.h * s.w) == 1:
        miss = "minus"
    if miss == "spatial":
        shape = (1, 1, s.h, s.w) if not last else (1, 1, s.w, 1)
    elif last:
        shape = d.draw(st.sampled_from([(s.c,), (1, 1, 1, s.c)]))
    else:
        shape = d.draw(st.sampled_from([(1, s.c, 1, 1), (s.c, 1, 1)]))
    nodes = [node(f"{p}t", "transpose", {"x": src}, perm=[0, 2, 3, 1])] if last else []
    x = f"{p}t" if last else src
    nodes += [
        node(f"{p}pos", "relu", {"x": x}),
        node(f"{p}neg", "mul", {"x": x}),
        node(f"{p}rneg", "relu", {"x": f"{p}neg"}),
        node(f"{p}scaled", "mul", {"x": f"{p}rneg"}),
        node(f"{p}y", "add", {"x": f"{p}scaled", "y": f"{p}pos"}),
    ]
    weights = {
        f"{p}neg.y": np.array([-2.0 if miss == "minus" else -1.0], np.float32),
        f"{p}scaled.y": _w(*shape, seed=d.draw(st.integers(0, 9))),
    }
    also = {f"{p}nhwc": f"{p}t"} if miss == "shared" else None
    out = f"{p}y"
    if last:  # back to channels first: every site's output has x's shape
        nodes.append(node(f"{p}back", "transpose", {"x": out}, perm=[0, 3, 1, 2]))
        out = f"{p}back"
    return Site(nodes, weights, out, [f"{p}rneg"], also)


def _conv_batchnorm(d, p, src, s, near):
    seed = d.draw(st.integers(0, 9))
    kind = d.draw(st.sampled_from(["mil.conv", "conv_transpose"]))
    nodes = [
        node(f"{p}c", kind, {"x": src}),
        node(f"{p}o", "batch_norm", {"x": f"{p}c"}, epsilon=d.draw(st.sampled_from([1e-5, 1e-3]))),
    ]
    weights = {
        f"{p}c.weight": _w(s.c, s.c, 1, 1, seed=seed),
        f"{p}o.mean": _w(s.c, seed=seed + 1),
        f"{p}o.variance": _w(s.c, low=0.5, high=2.0, seed=seed + 2),
        f"{p}o.gamma": _w(s.c, seed=seed + 3),
        f"{p}o.beta": _w(s.c, seed=seed + 4),
    }
    also = {f"{p}conv": f"{p}c"} if near else None
    return Site(nodes, weights, f"{p}o", [f"{p}o"], also)


def _norm(d, p, src, s, near):
    """A normalization in one of coremltools' five spellings (or a mixture): the variance
    centred (one sub or two) or as mean(x²) - mean² through reduce_sum · 1/N; d · rsqrt or
    d / root, or x·s - mean·s; gamma and beta after it in either order."""
    axes = d.draw(st.sampled_from([[3], [2, 3], [1, 2, 3], [1]]))
    form = d.draw(st.sampled_from(["centred", "twice", "shifted", "moments"]))
    miss = d.draw(st.sampled_from(["axes", "shared"])) if near else None
    second = axes
    if miss == "axes":
        second = [1] if axes != [1] else [3]
    count = math.prod(s.full[a] for a in axes)
    eps = np.array([d.draw(st.sampled_from([1e-5, 1e-3]))], np.float32)
    weights = {f"{p}ve.y": eps}
    if form == "moments":
        nodes = [
            node(f"{p}sum", "reduce_sum", {"x": src}, axes=axes, keep_dims=True),
            node(f"{p}mean", "mul", {"x": f"{p}sum"}),
            node(f"{p}xx", "square", {"x": src}),
            node(f"{p}sum2", "reduce_sum", {"x": f"{p}xx"}, axes=second, keep_dims=True),
            node(f"{p}e2", "mul", {"x": f"{p}sum2"}),
            node(f"{p}mm", "mul", {"x": f"{p}mean", "y": f"{p}mean"}),
            node(f"{p}var", "sub", {"x": f"{p}e2", "y": f"{p}mm"}),
        ]
        weights[f"{p}mean.y"] = np.array([1 / count], np.float32)
        weights[f"{p}e2.y"] = np.array([1 / count], np.float32)
        centred = None
    else:
        sq = d.draw(st.sampled_from(["square", "mul"]))
        nodes = [
            node(f"{p}mean", "reduce_mean", {"x": src}, axes=axes, keep_dims=True),
            node(f"{p}d", "sub", {"x": src, "y": f"{p}mean"}),
            node(f"{p}sq", sq, {"x": f"{p}d", **({"y": f"{p}d"} if sq == "mul" else {})}),
            node(f"{p}var", "reduce_mean", {"x": f"{p}sq"}, axes=second, keep_dims=True),
        ]
        centred = f"{p}d"
        if form == "twice":
            nodes.append(node(f"{p}d2", "sub", {"x": src, "y": f"{p}mean"}))
            centred = f"{p}d2"
    nodes.append(node(f"{p}ve", "add", {"x": f"{p}var"}))
    root = "rsqrt" if form in ("shifted", "moments") else d.draw(st.sampled_from(["rsqrt", "sqrt"]))
    nodes.append(node(f"{p}r", root, {"x": f"{p}ve"}))
    if centred is not None and form != "shifted":
        op = "mul" if root == "rsqrt" else "real_div"
        nodes.append(node(f"{p}n", op, {"x": centred, "y": f"{p}r"}))
    else:
        nodes += [
            node(f"{p}xr", "mul", {"x": src, "y": f"{p}r"}),
            node(f"{p}mr", "mul", {"x": f"{p}r", "y": f"{p}mean"}),
            node(f"{p}n", "sub", {"x": f"{p}xr", "y": f"{p}mr"}),
        ]
    last = f"{p}n"
    per_axes = tuple(s.full[i] if i in axes else 1 for i in range(4))
    # gamma and beta both along the normalized axes, or (instance_norm) both per channel
    shape = per_axes if axes != [2, 3] else d.draw(st.sampled_from([per_axes, (1, s.c, 1, 1)]))
    affine = [("g", "mul"), ("b", "add")]
    if d.draw(st.booleans()):
        affine.reverse()  # beta first, as ml-ane-transformers writes it
    for name, op in affine:
        if d.draw(st.booleans()):
            nodes.append(node(f"{p}{name}", op, {"x": last}))
            weights[f"{p}{name}.y"] = _w(*shape, low=0.5, high=1.5, seed=len(nodes))
            last = f"{p}{name}"
    also = {f"{p}centred": f"{p}mean"} if miss == "shared" else None
    first = f"{p}sum" if form == "moments" else f"{p}mean"
    return Site(nodes, weights, last, [first], also)


def _conv1d(d, p, src, s, near):
    """src as (1, C, H·W) (channels first) or (1, H·W, C) (channels last), a conv one high over
    a dummy axis (expand_dims -> conv -> squeeze; channels last with the transposes to
    (1, C, 1, S) and back around the conv), back to src's shape."""
    # "last" first: channels last in about half the draws (17 of 33 derandomized), a booleans()
    # draw gave it 7 of 31
    last = d.draw(st.sampled_from(["last", "first"])) == "last"
    misses = ["row", "shared", *(["back", "axis"] if last else [])]
    miss = d.draw(st.sampled_from(misses)) if near else None
    k = d.draw(st.sampled_from([1, 3]))
    conv = {"pad_type": "custom", "pad": [0, 0, k // 2, k // 2]}
    if miss == "row":  # a stride over the height reads a padded row: not a conv1d
        conv = {"pad_type": "custom", "pad": [1, 0, k // 2, k // 2], "strides": [2, 1]}
    if last:
        axis = 2 if miss == "axis" else d.draw(st.sampled_from([1, -3]))
        there = d.draw(st.sampled_from([[0, 3, 1, 2], [0, -1, 1, 2]]))
        back = (
            [0, 2, 1, 3]
            if miss == "back"
            else d.draw(st.sampled_from([[0, 2, 3, 1], [0, 2, -1, 1]]))
        )
        flat = [1, s.h * s.w, s.c]
        around = [
            node(f"{p}t", "transpose", {"x": f"{p}e"}, perm=there),
            node(f"{p}c", "mil.conv", {"x": f"{p}t"}, **conv),
            node(f"{p}b", "transpose", {"x": f"{p}c"}, perm=back),
        ]
        made = f"{p}b"
    else:
        axis = d.draw(st.sampled_from([2, -2]))
        flat = [1, s.c, s.h * s.w]
        around = [node(f"{p}c", "mil.conv", {"x": f"{p}e"}, **conv)]
        made = f"{p}c"
    nodes = [
        node(f"{p}flat", "reshape", {"x": src}, shape=flat),
        node(f"{p}e", "expand_dims", {"x": f"{p}flat"}, axes=[axis]),
        *around,
        node(f"{p}sq", "squeeze", {"x": made}, axes=[axis]),
        node(f"{p}y", "reshape", {"x": f"{p}sq"}, shape=list(s.full)),
    ]
    weights = {f"{p}c.weight": _w(s.c, s.c, 1, k, seed=d.draw(st.integers(0, 9)))}
    also = {f"{p}wide": f"{p}e"} if miss == "shared" else None
    return Site(nodes, weights, f"{p}y", [f"{p}c"], also)


def _rows(d, p, src, s) -> list[dict]:
    """src [1, C, H, W] as rows [C·H, W]: linear's and a weight matmul's x."""
    return [node(f"{p}rows", "reshape", {"x": src}, shape=[s.c * s.h, s.w])]


def _matmul_bias(d, p, src, s, near):
    op = d.draw(st.sampled_from(["add", "sub"]))
    miss = d.draw(st.sampled_from(["rows", "shared"])) if near else None
    first = op == "sub" and d.draw(st.booleans())
    nodes = [*_rows(d, p, src, s), node(f"{p}mm", "mil.matmul", {"x": f"{p}rows"})]
    nodes.append(node(f"{p}o", op, {"y": f"{p}mm"} if first else {"x": f"{p}mm"}))
    bias = (s.c * s.h, 1) if miss == "rows" else d.draw(st.sampled_from([(3,), (1, 3)]))
    weights = {f"{p}mm.y": _w(s.w, 3, seed=1), (f"{p}o.x" if first else f"{p}o.y"): _w(*bias)}
    also = {f"{p}product": f"{p}mm"} if miss == "shared" else None
    return Site(nodes, weights, f"{p}o", [f"{p}o"], also)


def _linear_bias(d, p, src, s, near):
    op = d.draw(st.sampled_from(["add", "sub"]))
    miss = d.draw(st.sampled_from(["rows", "shared"])) if near else None
    first = op == "sub" and d.draw(st.booleans())
    nodes = [*_rows(d, p, src, s), node(f"{p}lin", "linear", {"x": f"{p}rows"})]
    nodes.append(node(f"{p}o", op, {"y": f"{p}lin"} if first else {"x": f"{p}lin"}))
    bias = (s.c * s.h, 1) if miss == "rows" else (3,)
    weights = {
        f"{p}lin.weight": _w(3, s.w, seed=2),
        f"{p}lin.bias": _w(3, seed=3),
        (f"{p}o.x" if first else f"{p}o.y"): _w(*bias),
    }
    also = {f"{p}product": f"{p}lin"} if miss == "shared" else None
    return Site(nodes, weights, f"{p}o", [f"{p}o"], also)


def _paddings(d, p, src, s, near):
    if near:  # constants that differ, or modes that differ
        kinds = d.draw(
            st.sampled_from(
                [("constant", 0.5, "constant", 0.25), ("constant", 0.0, "replicate", None)]
            )
        )
    else:
        kinds = d.draw(
            st.sampled_from(
                [("constant", 0.5, "constant", 0.5), ("replicate", None, "replicate", None)]
            )
        )
    first_mode, first_value, second_mode, second_value = kinds
    axes = (2, 3) if first_mode == "replicate" or d.draw(st.booleans()) else (3, 3)

    def pad(i, mode, value, axis):
        params = {"pad": [1, 1] if axis == 3 else [1, 0, 0, 0], "mode": mode}
        if value is not None:
            params["constant_val"] = value
        return node(f"{p}{i}", "pad", {"x": src if i == "a" else f"{p}a"}, **params)

    nodes = [
        pad("a", first_mode, first_value, axes[0]),
        pad("b", second_mode, second_value, axes[1]),
    ]
    return Site(nodes, {}, f"{p}b", [f"{p}b"])


def _pad_conv(d, p, src, s, near):
    transpose = d.draw(st.booleans())
    miss = d.draw(st.sampled_from(["value", "shared"])) if near else None
    pads = [0, 0, 0, 0, *d.draw(st.lists(st.integers(0, 2), min_size=4, max_size=4))]
    pads[4] = max(pads[4], 1)
    nodes = [
        node(f"{p}p", "pad", {"x": src}, pad=pads, constant_val=1.0 if miss == "value" else 0.0)
    ]
    last = f"{p}p"
    if transpose:
        nodes.append(node(f"{p}t", "transpose", {"x": last}, perm=[0, 1, 3, 2]))
        last = f"{p}t"
    nodes.append(node(f"{p}c", "mil.conv", {"x": last}))
    also = {f"{p}padded": f"{p}p"} if miss == "shared" else None
    return Site(nodes, {f"{p}c.weight": _w(s.c, s.c, 1, 1, seed=4)}, f"{p}c", [f"{p}p"], also)


def _dequantize(d, p, src, s, near):
    """A dequantized constant (planted) or a dequantized quantize of the input (near-miss),
    multiplying the input (fp32 here: dequantize gives its scale's dtype)."""
    if near:
        nodes = [
            node(f"{p}q", "quantize", {"input": src}, output_dtype="int8", scale=0.05),
            node(f"{p}dq", "dequantize", {"input": f"{p}q"}, scale=0.05),
        ]
        weights = {}
    else:
        shape = d.draw(st.sampled_from([(1, s.c, 1, 1), s.full]))
        data = np.random.default_rng(d.draw(st.integers(0, 9))).integers(-100, 100, shape)
        nodes = [node(f"{p}dq", "dequantize", {}, scale=d.draw(st.sampled_from([0.05, 0.01])))]
        weights = {f"{p}dq.input": data.astype(np.int8)}
    nodes.append(node(f"{p}m", "mul", {"x": src, "y": f"{p}dq"}))
    return Site(nodes, weights, f"{p}m", [f"{p}dq"])


def _moved_weight(d, p, src, s, near):
    """A dequantized int8 constant (W, H, C) transposed to (C, H, W) and reshaped to src's
    shape: merged into the constexpr (planted); per channel, whose axis a reshape would lose,
    or the dequantized weight read elsewhere too (near-miss: the reshape stays)."""
    miss = d.draw(st.sampled_from(["per-channel", "shared"])) if near else None
    rng = np.random.default_rng(d.draw(st.integers(0, 9)))
    data = rng.integers(-100, 100, (s.w, s.h, s.c)).astype(np.int8)
    if miss == "per-channel":
        dq = node(f"{p}dq", "dequantize", {}, axis=2)
        weights = {f"{p}dq.scale": _w(s.c, low=0.01, high=0.05, seed=1)}
    else:
        dq = node(f"{p}dq", "dequantize", {}, scale=d.draw(st.sampled_from([0.05, 0.01])))
        weights = {}
    weights[f"{p}dq.input"] = data
    nodes = [
        dq,
        node(f"{p}t", "transpose", {"x": f"{p}dq"}, perm=[2, 1, 0]),
        node(f"{p}r", "reshape", {"x": f"{p}t"}, shape=list(s.full)),
        node(f"{p}m", "mul", {"x": src, "y": f"{p}r"}),
    ]
    also = {f"{p}weight": f"{p}dq"} if miss == "shared" else None
    return Site(nodes, weights, f"{p}m", [f"{p}r"] if near else [f"{p}t", f"{p}r"], also)


def _requantize(d, p, src, s, near):
    second = 0.025 if near else 0.05
    nodes = [
        node(f"{p}q", "quantize", {"input": src}, output_dtype="int8", scale=0.05),
        node(f"{p}dq", "dequantize", {"input": f"{p}q"}, scale=0.05),
        node(f"{p}q2", "quantize", {"input": f"{p}dq"}, output_dtype="int8", scale=second),
        node(f"{p}y", "dequantize", {"input": f"{p}q2"}, scale=second),
    ]
    also = {f"{p}mid": f"{p}dq"} if d.draw(st.booleans()) else None
    return Site(nodes, {}, f"{p}y", [f"{p}q2"], also)


def _quantized_reshape(d, p, src, s, near):
    """dequantize -> reshape -> quantize with the same parameters (planted: the integers are
    reshaped) or with another scale (near-miss: the float path stays)."""
    second = 0.025 if near else 0.05
    dtype = d.draw(st.sampled_from(["int8", "uint8"]))
    nodes = [
        node(f"{p}q", "quantize", {"input": src}, output_dtype=dtype, scale=0.05),
        node(f"{p}dq", "dequantize", {"input": f"{p}q"}, scale=0.05),
        node(f"{p}r", "reshape", {"x": f"{p}dq"}, shape=[1, s.c, -1]),
        node(f"{p}q2", "quantize", {"input": f"{p}r"}, output_dtype=dtype, scale=second),
        node(f"{p}y", "dequantize", {"input": f"{p}q2"}, scale=second),
        node(f"{p}back", "reshape", {"x": f"{p}y"}, shape=list(s.full)),
    ]
    also = {f"{p}mid": f"{p}dq"} if d.draw(st.booleans()) else None
    return Site(nodes, {}, f"{p}back", [f"{p}r"], also)


def _token_major(d, p, src, s, near):
    """A product by a constant weight over the channels written token-major between transposes
    (planted), or with a transpose back that does not undo the first (near-miss)."""
    rank3 = not near and d.draw(st.booleans())  # (B, C, S): src with H and W as one axis
    first = [0, 2, 1] if rank3 else d.draw(st.sampled_from([[0, 2, 3, 1], [0, 3, 2, 1]]))
    back = [first.index(i) for i in range(len(first))]
    if near:
        back = [0, 3, 2, 1] if back != [0, 3, 2, 1] else [0, 3, 1, 2]
    out = d.draw(st.sampled_from([2, 3, 5]))
    nodes = [node(f"{p}flat", "reshape", {"x": src}, shape=[1, s.c, s.h * s.w])] if rank3 else []
    nodes += [
        node(f"{p}t", "transpose", {"x": f"{p}flat" if rank3 else src}, perm=first),
        node(f"{p}mm", "mil.matmul", {"x": f"{p}t"}),
    ]
    weights = {f"{p}mm.y": _w(s.c, out, low=-0.5, high=0.5, seed=5)}
    last = f"{p}mm"
    if d.draw(st.booleans()):
        nodes.append(node(f"{p}b", d.draw(st.sampled_from(["add", "sub"])), {"x": last}))
        weights[f"{p}b.y"] = _w(out, seed=6)
        last = f"{p}b"
    nodes.append(node(f"{p}back", "transpose", {"x": last}, perm=back))
    return Site(nodes, weights, f"{p}back", [f"{p}mm"])


def _rank5(d, p, src, s, near):
    """[1, C, H, W] split to [1, 2, C/2, H, W], transposed, maybe through unary ops and a
    scalar, and reshaped back (planted); transposed with every axis apart (near-miss)."""
    if near:
        perm = d.draw(st.sampled_from([[4, 3, 2, 1, 0], [2, 4, 0, 3, 1]]))
    else:
        perm = d.draw(
            st.permutations(range(5)).filter(lambda q: any(q[i + 1] == q[i] + 1 for i in range(4)))
        )
    nodes = [
        node(f"{p}split", "reshape", {"x": src}, shape=[1, 2, s.c // 2, s.h, s.w]),
        node(f"{p}t", "transpose", {"x": f"{p}split"}, perm=list(perm)),
    ]
    last, weights = f"{p}t", {}
    for i, op in enumerate(d.draw(st.lists(st.sampled_from([*UNARY, "mul"]), max_size=2))):
        nodes.append(node(f"{p}u{i}", op, {"x": last}))
        if op == "mul":
            weights[f"{p}u{i}.y"] = np.array([1.5], np.float32)
        last = f"{p}u{i}"
    nodes.append(node(f"{p}back", "reshape", {"x": last}, shape=list(s.full)))
    return Site(nodes, weights, f"{p}back", [f"{p}split"])


def _rank6(d, p, src, s, near):
    """[1, C, H, W] reshaped to rank 6, transposed by any perm, and reshaped back (planted); the
    same with the transpose's output read elsewhere too (near-miss)."""
    perm = d.draw(st.permutations(range(6)).filter(lambda q: list(q) != sorted(q)))
    nodes = [
        node(f"{p}split", "reshape", {"x": src}, shape=[1, 2, s.c // 2, s.h, s.w, 1]),
        node(f"{p}t", "transpose", {"x": f"{p}split"}, perm=list(perm)),
        node(f"{p}back", "reshape", {"x": f"{p}t"}, shape=list(s.full)),
    ]
    also = {f"{p}moved": f"{p}t"} if near else None
    return Site(nodes, {}, f"{p}back", [f"{p}split", f"{p}t"], also)


def _select(d, p, src, s, near):
    """select on a constant condition: one value everywhere (planted) or mixed (near-miss)."""
    if near:
        cond = np.arange(s.c).reshape(1, s.c, 1, 1) % 2 == 0
    else:
        cond = np.full((1, s.c, 1, 1), d.draw(st.booleans()))
    nodes = [
        node(f"{p}r", "relu", {"x": src}),
        node(f"{p}s", "sigmoid", {"x": src}),
        node(f"{p}y", "select", {"a": f"{p}r", "b": f"{p}s"}),
    ]
    return Site(nodes, {f"{p}y.cond": cond}, f"{p}y", [f"{p}y"])


def _scale_shift(d, p, src, s, near):
    miss = d.draw(st.sampled_from(["shape", "shared"])) if near else None
    shape = (s.c, 1, 1) if miss == "shape" else (1, s.c, 1, 1)
    nodes = [node(f"{p}m", "mul", {"x": src}), node(f"{p}y", "add", {"x": f"{p}m"})]
    weights = {f"{p}m.y": _w(*shape, low=0.5, high=1.5, seed=7), f"{p}y.y": _w(*shape, seed=8)}
    also = {f"{p}scaled": f"{p}m"} if miss == "shared" else None
    return Site(nodes, weights, f"{p}y", [f"{p}m"], also)


def _conv_transpose(d, p, src, s, near):
    params = {"output_shape": list(s.full)} if near else {}
    nodes = [node(f"{p}ct", "conv_transpose", {"x": src}, **params)]
    return Site(nodes, {f"{p}ct.weight": _w(s.c, s.c, 1, 1, seed=9)}, f"{p}ct", [f"{p}ct"])


def _zero_points(d, p, src, s, near):
    """quantize -> dequantize per channel (fp32 program) with zero points of 0 (planted) or of
    another value (near-miss)."""
    dtype = d.draw(st.sampled_from(["int8", "uint8"]))
    zero = d.draw(st.integers(1, 5)) if near else 0
    zeros = np.full(s.c, zero, np.int8 if dtype == "int8" else np.uint8)
    scale = _w(s.c, low=0.02, high=0.05, seed=10)
    nodes = [
        node(f"{p}q", "quantize", {"input": src}, output_dtype=dtype, axis=1),
        node(f"{p}dq", "dequantize", {"input": f"{p}q"}, axis=1),
    ]
    weights = {
        f"{p}q.scale": scale,
        f"{p}q.zero_point": zeros,
        f"{p}dq.scale": scale,
        f"{p}dq.zero_point": zeros,
    }
    return Site(nodes, weights, f"{p}dq", [f"{p}dq"])


def _stack_reshape(d, p, src, s, near):
    axis = d.draw(st.integers(0, 4))
    shape = list(s.full)
    if near:
        target = [2 * s.c * s.h * s.w]
    elif axis < 4 and (axis == 0 or d.draw(st.booleans())):
        target = [*shape[:axis], 2 * shape[axis], *shape[axis + 1 :]]
    else:
        target = [*shape[: axis - 1], shape[axis - 1] * 2, *shape[axis:]]
    nodes = [
        node(f"{p}a", "relu", {"x": src}),
        node(f"{p}b", "sigmoid", {"x": src}),
        {
            "id": f"{p}s",
            "op": "stack",
            "inputs": {"values": [f"{p}a", f"{p}b"]},
            "params": {"axis": axis},
        },
        node(f"{p}y", "reshape", {"x": f"{p}s"}, shape=target),
    ]
    return Site(nodes, {}, f"{p}y", [f"{p}s"])


def _reflection(d, p, src, s, near):
    """x's mirrored slices concatenated around it along an axis of at least 2 (planted); the
    same slices one index off (near-miss: a reflection that repeats the edge)."""
    full = list(s.full)
    axis = d.draw(st.sampled_from([a for a in (1, 2, 3) if full[a] >= 2]))
    n = full[axis]
    left, right = d.draw(st.integers(0, n - 1)), d.draw(st.integers(0, n - 1))
    if left + right == 0:
        left = 1
    shift = -1 if near else 0

    def piece(name: str, index: int) -> dict:
        begin, end = [0] * 4, list(full)
        begin[axis], end[axis] = index, index + 1
        return node(name, "slice_by_index", {"x": src}, begin=begin, end=end)

    lefts = [piece(f"{p}l{k}", k + shift) for k in range(left, 0, -1)]
    rights = [piece(f"{p}r{k}", n - 2 - k - shift) for k in range(right)]
    parts = [v["id"] for v in lefts] + [src] + [v["id"] for v in rights]
    cat = {"id": f"{p}y", "op": "concat", "inputs": {"values": parts}, "params": {"axis": axis}}
    return Site([*lefts, *rights, cat], {}, f"{p}y", [f"{p}y"])


def _up_convolution(d, p, src, s, near):
    """Four maps interleaved along H in pairs, then along W (planted); or along H again
    (near-miss). Axes counted from either end."""
    sources = [node(f"{p}v{i}", UNARY[i], {"x": src}) for i in range(4)]
    h, w = d.draw(st.sampled_from([2, -2])), d.draw(st.sampled_from([3, -1]))

    def cat(id, values, axis):
        params = {"axis": axis, "interleave": True}
        return {"id": id, "op": "concat", "inputs": {"values": values}, "params": params}

    nodes = [
        *sources,
        cat(f"{p}top", [f"{p}v0", f"{p}v1"], h),
        cat(f"{p}bottom", [f"{p}v2", f"{p}v3"], h),
        cat(f"{p}y", [f"{p}top", f"{p}bottom"], h if near else w),
    ]
    return Site(nodes, {}, f"{p}y", [f"{p}y"])


def _quantized_add(d, p, src, s, near):
    """dequantize(src) ± dequantize(x) quantized again (fp32 program), small scales (a step of
    fp16 compute's rounding is then within the tolerance; values beyond int8 saturate alike); near-miss: the sum read elsewhere too."""
    op = d.draw(st.sampled_from(["add", "sub"]))
    nodes = [
        node(f"{p}qa", "quantize", {"input": src}, output_dtype="int8", scale=0.02),
        node(f"{p}da", "dequantize", {"input": f"{p}qa"}, scale=0.02),
        node(f"{p}qb", "quantize", {"input": "x"}, output_dtype="int8", scale=0.015),
        node(f"{p}db", "dequantize", {"input": f"{p}qb"}, scale=0.015),
        node(f"{p}s", op, {"x": f"{p}da", "y": f"{p}db"}),
        node(f"{p}qz", "quantize", {"input": f"{p}s"}, output_dtype="int8", scale=0.025),
        node(f"{p}y", "dequantize", {"input": f"{p}qz"}, scale=0.025),
    ]
    also = {f"{p}sum": f"{p}s"} if near else None
    return Site(nodes, {}, f"{p}y", [f"{p}db"], also)


PLANTERS: dict[str, Callable] = {
    "const_deduplication": _dedup,
    "const_elimination": _fold,
    "noop_elimination": _noop,
    "remove_redundant_ops": _redundant,
    "fuse_reduce_mean": _reduce_mean,
    "divide_to_multiply": _divide,
    "fuse_conv_bias": _conv_then("add"),
    "fuse_conv_scale": _conv_then("mul"),
    "fuse_transpose_matmul": _transpose_matmul,
    "cast_optimization": _casts,
    "merge_consecutive_relus": _relus,
    "merge_consecutive_reshapes": _repeated("reshape"),
    "merge_consecutive_transposes": _repeated("transpose"),
    "reduce_transposes": _reduce_transposes,
    "add_fp16_cast": _fp16,
    "fuse_gelu_tanh_approximation": _gelu,
    "detect_concat_interleave": _shuffle,
    "fuse_gelu_exact": _gelu_exact,
    "fuse_leaky_relu": _leaky,
    "fuse_prelu": _prelu,
    "fuse_conv_batchnorm": _conv_batchnorm,
    "compose_conv1d": _conv1d,
    "fuse_layernorm_or_instancenorm": _norm,
    "fuse_matmul_weight_bias": _matmul_bias,
    "fuse_linear_bias": _linear_bias,
    "merge_consecutive_paddings": _paddings,
    "fuse_pad_conv": _pad_conv,
    "dequantize_to_constexpr": _dequantize,
    "merge_affine_dequantize_with_consecutive_ops": _moved_weight,
    "dequantize_quantize_pair_elimination": _requantize,
    "int_op_canonicalization": _quantized_reshape,
    "select_optimization": _select,
    "fuse_elementwise_to_batchnorm": _scale_shift,
    "add_conv_transpose_output_shape": _conv_transpose,
    "nullify_redundant_quantization_zero_point": _zero_points,
    "replace_stack_reshape": _stack_reshape,
    "use_reflection_padding": _reflection,
    "concat_to_pixel_shuffle": _up_convolution,
    "distributive_quantized_binary_op_scale_normalization": _quantized_add,
    "expand_high_rank_reshape_and_transpose": _rank6,
    # beyond the seed
    "matmul_to_conv": _token_major,
    "fold_high_rank": _rank5,
}
OPTIONS = {"const_deduplication": {"const_threshold": 1}}  # the draws' consts are small
# a graph const without a tensor beside it is fp32 (and dequantize gives its scale's dtype, quantize
# takes its input's)
FP32 = {
    "const_elimination",
    "add_fp16_cast",
    "dequantize_to_constexpr",
    "merge_affine_dequantize_with_consecutive_ops",
    "dequantize_quantize_pair_elimination",
    "int_op_canonicalization",
    "nullify_redundant_quantization_zero_point",
    "distributive_quantized_binary_op_scale_normalization",
}


def _program(d, graph_pass: str) -> tuple[dict, dict, Site, Site]:
    s = Shape(
        d.draw(st.sampled_from([2, 4])),
        d.draw(st.sampled_from([1, 2, 3])),
        d.draw(st.sampled_from([1, 2, 4])),
    )
    nodes, weights, last = [], {}, "x"
    for i, op in enumerate(d.draw(st.lists(st.sampled_from([*UNARY, "mul", "add"]), max_size=3))):
        nodes.append(node(f"pre{i}", op, {"x": last}))
        if op in ("mul", "add"):
            weights[f"pre{i}.y"] = _w(1, s.c, 1, 1, low=0.5, high=1.5, seed=i)
        last = f"pre{i}"
    nodes.append(node("barrier", "mul", {"x": last, "y": "x"}))
    outputs: dict[str, str] = {}
    sites = []
    for prefix, near in (("p_", False), ("n_", True)):
        site = PLANTERS[graph_pass](d, prefix, "barrier", s, near)
        nodes += site.nodes
        weights |= site.weights
        nodes.append(node(f"{prefix}after", d.draw(st.sampled_from(UNARY)), {"x": site.out}))
        outputs[f"{prefix}out"] = f"{prefix}after"
        outputs |= site.also or {}
        sites.append(site)
    dtype = "fp32" if graph_pass in FP32 else "fp16"
    body = {
        "inputs": {"x": {"shape": list(s.full), "dtype": dtype}},
        "nodes": nodes,
        "outputs": outputs,
    }
    return body, weights, sites[0], sites[1]


# passes run first, to make what a graph request cannot write (a constexpr)
PRELUDE = {"merge_affine_dequantize_with_consecutive_ops": ["dequantize_to_constexpr"]}


def _passes(graph_pass: str):
    if graph_pass in OPTIONS:
        return {"pipeline": [graph_pass], "options": {graph_pass: OPTIONS[graph_pass]}}
    return [*PRELUDE.get(graph_pass, []), graph_pass]


def _check(d, graph_pass: str) -> None:
    body, weights, planted, near = _program(d, graph_pass)
    alone = build(body, weights, _passes(graph_pass))
    removed = {name for c in alone.passes.changes for _, name in c.removed}
    assert set(planted.marks) <= removed, (planted.marks, alone.passes.to_json())
    assert not set(near.marks) & removed, (near.marks, alone.passes.to_json())
    assert_agrees(alone)
    assert_agrees(build(body, weights, "default"))


def test_every_pass_is_planted_here_or_in_an_ir_property():
    ir = {
        # integer indices, in range (tests/test_passes_seed.py), not a float program's
        "fuse_onehot_matmul_to_gather",
        "dead_code_elimination",
        "dedup_op_and_var_names",
        "topological_reorder",
        "rank0_expand_dims_swap",
        "canonicalize_inplace_pattern",
        "prefer_state_in_downstream",
    }
    assert set(PLANTERS) | ir == set(PASSES)


# One test per pass, so that a failure names it; each draw fires the pass (the planted pattern)
# and offers it a near-miss.
def _test_for(graph_pass: str):
    @PROFILE
    @given(st.data())
    def test(data):
        _check(data, graph_pass)

    test.__name__ = f"test_{graph_pass}_fires_on_its_pattern_only_and_keeps_the_meaning"
    return test


for _name in PLANTERS:
    globals()[f"test_{_name}_fires_on_its_pattern_only_and_keeps_the_meaning"] = _test_for(_name)


# -- passes a graph request cannot plant: programs built on the IR --------------------------------
def _random_chain(d, b: Builder, x, prefix: str):
    value = x
    for i, op in enumerate(d.draw(st.lists(st.sampled_from(UNARY), min_size=1, max_size=4))):
        value = b.op(op, f"{prefix}{i}", x=value)
    return value


def _same_outputs(before, after) -> None:
    inputs = random_inputs(before.main, 0)
    want, got = Executor(before).run(inputs).outputs, Executor(after).run(inputs).outputs
    assert all(np.array_equal(want[k], got[k]) for k in want)


@PROFILE
@given(st.data())
def test_dead_code_elimination_removes_the_dead_branch_only(data):
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    live = _random_chain(data, b, x, "live")
    dead = _random_chain(data, b, x, "dead")
    program = b.build([live])
    after, _ = run_pipeline(program, resolve(parse_passes("dead_code_elimination")))
    names = {op.name for op in after.main.operations}
    assert not any(n.startswith("dead") for n in names) and dead.name not in names
    assert {op.name for op in program.main.operations if op.name.startswith("live")} <= names
    _same_outputs(program, after)


@PROFILE
@given(st.data())
def test_dedup_op_and_var_names_leaves_every_name_once_and_the_outputs_as_they_were(data):
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    value = _random_chain(data, b, x, "op")
    program = b.build([value])
    ops = program.main.operations
    if len(ops) > 2:  # an importer's repeated name: an op between the first and the output's
        twice = data.draw(st.sampled_from(ops[1:-1]))
        twice.name = twice.outputs[0].name = ops[0].name
    after, _ = run_pipeline(program, resolve(parse_passes("dedup_op_and_var_names")))
    fn = after.main
    assert len({op.name for op in fn.operations}) == len(fn.operations)
    assert len({v.name for op in fn.operations for v in op.outputs}) == len(fn.operations)
    assert [v.name for v in fn.outputs] == [v.name for v in program.main.outputs]
    _same_outputs(program, after)


@PROFILE
@given(st.data())
def test_topological_reorder_puts_each_transpose_just_before_its_reader(data):
    """A transpose listed early, its reader late with other ops between (planted), and one
    listed just before its reader (near-miss): only the first moves."""
    between = data.draw(st.lists(st.sampled_from(UNARY), min_size=1, max_size=3))
    nodes = [node("t_early", "transpose", {"x": "x"}, perm=[0, 2, 1, 3])]
    last = "x"
    for i, op in enumerate(between):
        nodes.append(node(f"b{i}", op, {"x": last}))
        last = f"b{i}"
    nodes += [
        node("r_early", "relu", {"x": "t_early"}),
        node("t_late", "transpose", {"x": last}, perm=[0, 2, 1, 3]),
        node("r_late", "relu", {"x": "t_late"}),
        node("y", "add", {"x": "r_early", "y": "r_late"}),
    ]
    body = {
        "inputs": {"x": {"shape": [1, 2, 3, 4], "dtype": "fp16"}},
        "nodes": nodes,
        "outputs": {"out": "y"},
    }
    built = build(body, {}, ["topological_reorder"])
    named = [op.name for op in built.program.main.operations if op.type != "const"]
    assert named.index("r_early") - named.index("t_early") == 1
    assert named.index("t_early") > named.index(last)
    assert named.index("r_late") - named.index("t_late") == 1
    assert_agrees(built)
    assert_agrees(build(body, {}, "default"))


@PROFILE
@given(st.data())
def test_rank0_expand_dims_swap_on_a_rank0_op_only(data):
    """A rank-0 op with a scalar const then expand_dims (planted), and the same op with a
    rank-1 const (near-miss), each maybe read elsewhere too."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (2, 3))
    total = b.op("reduce_sum", "total", x=_random_chain(data, b, x, "pre"))
    outputs = []
    for prefix, shape in (("p_", ()), ("n_", (1,))):
        op = data.draw(st.sampled_from(["add", "sub", "mul", "maximum", "minimum"]))
        c = b.const(f"{prefix}c", np.full(shape, data.draw(st.floats(-2, 2, width=16))), DType.FP16)
        args = {"x": total, "y": c} if data.draw(st.booleans()) else {"x": c, "y": total}
        value = b.op(op, f"{prefix}op", **args)
        outputs.append(b.op("expand_dims", f"{prefix}e", x=value, axes=[0]))
        if data.draw(st.booleans()):
            outputs.append(b.op("relu", f"{prefix}other", x=value))
    program = b.build(outputs)
    after, report = run_pipeline(program, resolve(parse_passes("rank0_expand_dims_swap")))
    removed = {name for c in report.changes for _, name in c.removed}
    assert "p_op" in removed and "n_op" not in removed
    _same_outputs(program, after)


@PROFILE
@given(st.data())
def test_canonicalize_inplace_pattern_moves_a_write_unless_a_read_lies_between(data):
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    outputs = []
    for prefix, near in (("p_", False), ("n_", True)):
        state = b.state(f"{prefix}state", DType.FP16, (1, 4))
        made = b.op("mul", f"{prefix}made", x=b.op("read_state", f"{prefix}held", input=state), y=x)
        later = _random_chain(data, b, made, f"{prefix}later")
        if near:
            later = b.op(
                "add", f"{prefix}peek", x=later, y=b.op("read_state", f"{prefix}read", input=state)
            )
        b.op_outputs("write_state", f"{prefix}write", input=state, data=made)
        outputs.append(later)
    program = b.build(outputs)
    after, _ = run_pipeline(program, resolve(parse_passes("canonicalize_inplace_pattern")))
    names = [op.name for op in after.main.operations if op.type != "const"]
    assert names.index("p_write") == names.index("p_made") + 1
    assert names.index("n_write") == len(names) - 1
    inputs = random_inputs(program.main, 0)
    for state_name in ("p_state", "n_state"):
        inputs[state_name] = np.ones((1, 4), np.float16)
    runs = [Executor(p) for p in (program, after)]
    outs = [r.run(dict(inputs)).outputs for r in runs]
    assert all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])
    assert all(np.array_equal(runs[0].states[k], runs[1].states[k]) for k in runs[0].states)


@PROFILE
@given(st.data())
def test_prefer_state_in_downstream_reads_the_state_back_after_an_update_only(data):
    """An update of a state by a chain's value, read after it by another chain (planted: that
    chain reads the update's output), and a value read only by its update and by an update of
    another state (near-miss): the outputs and the states after one call are the same."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4))
    outputs = []
    for prefix, near in (("p_", False), ("n_", True)):
        state = b.state(f"{prefix}state", DType.FP16, (1, 4))
        made = b.op("mul", f"{prefix}made", x=b.op("read_state", f"{prefix}held", input=state), y=x)
        made = _random_chain(data, b, made, f"{prefix}chain")
        update = b.op("coreml_update_state", f"{prefix}update", state=state, value=made)
        if near:
            other = b.state(f"{prefix}other", DType.FP16, (1, 4))
            b.op("coreml_update_state", f"{prefix}copy", state=other, value=made)
            outputs.append(b.op("relu", f"{prefix}after", x=update))
        else:
            outputs.append(_random_chain(data, b, made, f"{prefix}later"))
    program = b.build(outputs)
    after, report = run_pipeline(program, resolve(parse_passes("prefer_state_in_downstream")))
    assert [c.graph_pass for c in report.changes] == ["prefer_state_in_downstream"]
    (first,) = [op for op in after.main.operations if op.name == "p_later0"]
    assert first.var("x").name == "p_update"
    (copy,) = [op for op in after.main.operations if op.name == "n_copy"]
    assert copy.var("value").name == copy.var("value").op.name != "n_update"
    inputs = random_inputs(program.main, 0)
    for name in ("p_state", "n_state", "n_other"):
        inputs[name] = np.full((1, 4), 0.5, np.float16)
    runs = [Executor(p) for p in (program, after)]
    outs = [r.run(dict(inputs)).outputs for r in runs]
    assert all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])
    assert all(np.array_equal(runs[0].states[k], runs[1].states[k]) for k in runs[0].states)
