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
}
OPTIONS = {"const_deduplication": {"const_threshold": 1}}  # the draws' consts are small
FP32 = {"const_elimination", "add_fp16_cast"}  # a graph const without a tensor beside it is fp32


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


def _passes(graph_pass: str):
    if graph_pass in OPTIONS:
        return {"pipeline": [graph_pass], "options": {graph_pass: OPTIONS[graph_pass]}}
    return [graph_pass]


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
        "dead_code_elimination",
        "dedup_op_and_var_names",
        "topological_reorder",
        "rank0_expand_dims_swap",
        "canonicalize_inplace_pattern",
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
