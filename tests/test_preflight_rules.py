"""Each preflight rule: a small program that trips it (rule, severity, node, and the numbers in the
message) and a nearby program that does not.

Programs come from the real builder where the op exists in the IR. Ops the IR does not declare
yet (gather, gelu, constexpr_*, an SDPA with a `scale` argument) are written as plain IR
operations, which is what a graph or quantization build will hand the preflight.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from app.mil import Builder, DType, Function, Operation, Program, TensorType, Var, get_target
from app.mil.ceilings import Ceilings
from app.preflight import RULES, PreflightOptions, Severity, preflight

F16, F32, I32 = DType.FP16, DType.FP32, DType.INT32


# -- program makers ----------------------------------------------------------------------------
def unary(shape, op="mul", dtype=F16, **args) -> Program:
    """x -> op -> y; `mul` multiplies by 2."""
    b = Builder()
    x = b.input("x", dtype, shape)
    args = args or ({"y": 2.0} if op == "mul" else {})
    return b.build([b.op(op, "y", x=x, **args)])


def reshaped(shape) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 16))
    r = b.op("reshape", "r", x=x, shape=list(shape))
    return b.build([b.op("reshape", "y", x=r, shape=[1, 4, 1, 16])])


def conv(kernel_width: int) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 64))
    w = b.const("W", np.zeros((4, 4, 1, kernel_width), np.float16), F16)
    return b.build([b.op("conv", "y", x=x, weight=w)])


def raw(op_type: str, name: str, shape, dtype=F16, **inputs) -> Var:
    """An IR operation the builder does not declare, with a given output type."""
    op = Operation(op_type, name, dict(inputs), [])
    op.outputs.append(Var(name, TensorType(dtype, tuple(shape)), op))
    return op.outputs[0]


def param(name: str, shape, dtype=F16) -> Var:
    return Var(name, TensorType(dtype, tuple(shape)))


def program_of(inputs: list[Var], outputs: list[Var]) -> Program:
    """A one-function program holding every op the outputs depend on, producers first."""
    ops: list[Operation] = []

    def visit(var: Var) -> None:
        if var.op is None or var.op in ops:
            return
        for value in var.op.inputs.values():
            for v in value if isinstance(value, tuple) else (value,):
                visit(v)
        ops.append(var.op)

    for out in outputs:
        visit(out)
    return Program(get_target("ios18"), {"main": Function("main", inputs, ops, outputs)})


def one_raw_op(op_type: str) -> Program:
    x = param("x", (1, 4, 1, 8))
    return program_of([x], [raw(op_type, "g", (1, 4, 1, 8), x=x)])


def rsqrt(epsilon: float | None) -> Program:
    return unary((1, 4, 1, 32), "rsqrt", **({"epsilon": epsilon} if epsilon else {}))


def fp32_compute(cast_first: bool) -> Program:
    b = Builder()
    x = b.input("x", F32, (1, 4, 1, 32))
    if not cast_first:
        return b.build([b.op("mul", "y", x=x, y=2.0)])
    h = b.op("mul", "h", x=b.op("cast", "x16", x=x, dtype="fp16"), y=2.0)
    return b.build([b.op("cast", "y", x=h, dtype="fp32")])


def sdpa(q_len: int, k_len: int, mask: bool = False) -> Program:
    b = Builder()
    q = b.input("q", F16, (1, 1, q_len, 64))
    k = b.input("k", F16, (1, 1, k_len, 64))
    v = b.input("v", F16, (1, 1, k_len, 64))
    extra = {"attn_mask": b.const("mask", np.zeros((1, 1, q_len, k_len), np.float16))}
    y = b.op(
        "scaled_dot_product_attention", "y", query=q, key=k, value=v, **(extra if mask else {})
    )
    return b.build([y])


def sdpa_scale_arg(with_scale: bool) -> Program:
    q, k, v = (param(n, (1, 1, 8, 64)) for n in ("q", "k", "v"))
    const = Operation("const", "c_scale", {}, [])
    const.outputs.append(Var("c_scale", TensorType(F16, ()), const))
    scale = {"scale": const.outputs[0]} if with_scale else {}
    y = raw("scaled_dot_product_attention", "y", (1, 1, 8, 64), query=q, key=k, value=v, **scale)
    return program_of([q, k, v], [y])


def square_then_sqrt(width: int) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, width))
    return b.build([b.op("sqrt", "y", x=b.op("square", "sq", x=x))])


def concat(count: int) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 32))
    return b.build([b.op("concat", "c", values=(x,) * count, axis=1)])


def broadcast(const_shape) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 8))
    w = b.const("w", np.ones(const_shape, np.float16), F16)
    return b.build([b.op("mul", "y", x=x, y=w)])


def palette(lut_rank: int, also_reshaped: bool = False) -> Program:
    """An iOS18 palettized conv weight: a const LUT of `lut_rank` (rank 6 for a conv weight)
    read by constexpr_lut_to_dense, and, when `also_reshaped`, by a runtime reshape as well."""
    x = param("x", (1, 4, 1, 8))
    lut = raw("const", "lut", (1,) * (lut_rank - 2) + (16, 1))
    indices = raw("const", "indices", (8, 4, 1, 1), DType.UINT4)
    w = raw("constexpr_lut_to_dense", "w_q", (8, 4, 1, 1), indices=indices, lut=lut)
    outputs = [raw("conv", "y", (1, 8, 1, 8), x=x, weight=w)]
    if also_reshaped:
        outputs.append(raw("reshape", "lut_r", (1, 16, 1, 1), x=lut))
    return program_of([x], outputs)


def constexpr_into(producer: str, consumer: str) -> Program:
    x = param("x", (1, 4, 1, 8))
    w = raw(producer, "w_q", (8, 4, 1, 1))
    if consumer == "conv":
        y = raw("conv", "y", (1, 8, 1, 8), x=x, weight=w)
    else:
        y = raw("mul", "y", (1, 8, 1, 8), x=x, y=raw("reshape", "w_r", (1, 8, 1, 4), x=w))
    return program_of([x], [y])


def two_inputs(first: str, second: str) -> Program:
    b = Builder()
    a = b.input(first, F16, (1, 32, 1, 32))
    c = b.input(second, F16, (1, 32, 1, 32))
    return b.build([b.op("add", "y", x=a, y=c)])


def conv_4_to_8(out_channels: int) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 8))
    w = b.const("W", np.zeros((out_channels, 4, 1, 1), np.float16), F16)
    return b.build([b.op("conv", "y", x=x, weight=w)])


def int_input(dtype: DType) -> Program:
    b = Builder()
    x = b.input("x", dtype, (1, 32, 1, 32))
    h = x if dtype is F16 else b.op("cast", "x16", x=x, dtype="fp16")
    return b.build([b.op("mul", "y", x=h, y=2.0)])


def read_state(shape) -> Program:
    b = Builder()
    return b.build([b.op("read_state", "y", input=b.state("kv", F16, shape))])


def update_state() -> Program:
    b = Builder()
    kv, value = b.state("kv", F16, (1, 1, 4, 32)), b.input("value", F16, (1, 1, 4, 32))
    b.op_outputs("write_state", "kv_write", input=kv, data=value)
    return b.build([b.op("read_state", "y", input=kv)])


def runtime_matmul(inner: int, const_y: bool = False) -> Program:
    b = Builder()
    x = b.input("x", F16, (1, 1, 8, inner))
    y = (
        b.const("w", np.zeros((1, 1, inner, 8), np.float16), F16)
        if const_y
        else b.input("w", F16, (1, 1, inner, 8))
    )
    return b.build([b.op("matmul", "m", x=x, y=y)])


def weights(*shapes, lazy: bool = False) -> Program:
    """x -> mul -> y, plus unused blob consts w1, w2, ... of the given shapes (zero-stride arrays
    when lazy, so gigabyte weights cost no memory). Lazy programs are built with the service's
    per-tensor ceilings raised: the rules judge a device's limits whatever the service admits."""
    b = (
        Builder(ceilings=Ceilings(tensor_elements=1 << 31, tensor_bytes=1 << 32))
        if lazy
        else Builder()
    )
    x = b.input("x", F16, (1, 32, 1, 32))
    for i, shape in enumerate(shapes, 1):
        data = np.broadcast_to(np.float16(0), shape) if lazy else np.zeros(shape, np.float16)
        b.const(f"w{i}", data, F16)
    return b.build([b.op("mul", "y", x=x, y=2.0)])


def channel_reduce(channels: int, op: str = "reduce_sum") -> Program:
    return unary((1, channels, 1, 32), op, axes=[1], keep_dims=True)


# -- the cases ---------------------------------------------------------------------------------
@dataclass
class Case:
    rule: str
    severity: Severity
    node: str
    numbers: tuple[str, ...]  # substrings the message must carry
    trip: Callable[[], Program]
    near: Callable[[], Program]
    options: PreflightOptions = field(default_factory=PreflightOptions)


E, W, A = Severity.ERROR, Severity.WARNING, Severity.ADVICE
CASES = [
    Case(
        "rank.core-ml-max",
        E,
        "r",
        ("rank 6", "5"),
        lambda: reshaped([1, 1, 1, 1, 4, 16]),
        lambda: reshaped([1, 1, 1, 4, 16]),
    ),
    Case(
        "rank.ane-4d",
        W,
        "r",
        ("rank 5", "4"),
        lambda: reshaped([1, 1, 1, 4, 16]),
        lambda: reshaped([1, 4, 16, 1]),
    ),
    # coremltools' own check lets a const read only by constexpr ops be rank 6 (the iOS18
    # palette of a conv weight); read by a runtime op as well, it is a tensor like any other.
    Case(
        "rank.core-ml-max",
        E,
        "lut",
        ("rank 6", "5"),
        lambda: palette(6, also_reshaped=True),
        lambda: palette(6),
    ),
    Case(
        "rank.ane-4d",
        W,
        "lut",
        ("rank 5", "4"),
        lambda: palette(5, also_reshaped=True),
        lambda: palette(5),
    ),
    Case(
        "axis.max-any-chip",
        E,
        "x",
        ("70,000", "65,536"),
        lambda: unary((1, 70_000)),
        lambda: unary((1, 65_536)),
    ),
    Case(
        "axis.max-older-chips",
        W,
        "x",
        ("16,385", "16,384"),
        lambda: unary((1, 16_385)),
        lambda: unary((1, 16_384)),
    ),
    Case("conv.kernel-max", E, "y", ("1x17", "17", "16"), lambda: conv(17), lambda: conv(16)),
    Case("conv.kernel-chip", W, "y", ("1x14", "14", "13"), lambda: conv(14), lambda: conv(13)),
    Case(
        "op.unsupported",
        E,
        "g",
        ("gather",),
        lambda: one_raw_op("gather"),
        lambda: one_raw_op("relu"),
    ),
    Case(
        "op.unsupported",
        E,
        "g",
        ("cumsum",),
        lambda: one_raw_op("cumsum"),
        lambda: one_raw_op("relu"),
    ),
    Case(
        "op.unsupported",
        E,
        "g",
        ("reduce_prod",),
        lambda: one_raw_op("reduce_prod"),
        lambda: one_raw_op("reduce_sum"),
    ),
    Case(
        "op.reported-failing",
        W,
        "g",
        ("gelu", "Orion"),
        lambda: one_raw_op("gelu"),
        lambda: one_raw_op("sigmoid"),
    ),
    Case(
        "op.reported-failing",
        W,
        "g",
        ("layer_norm", "affine values"),
        lambda: one_raw_op("layer_norm"),
        lambda: one_raw_op("reduce_l2_norm"),
    ),
    Case(
        "op.disputed",
        A,
        "y",
        ("reduce_mean", "Espresso"),
        lambda: channel_reduce(16, "reduce_mean"),
        lambda: channel_reduce(16, "reduce_sum"),
    ),
    Case(
        "op.epsilon",
        W,
        "y",
        ("rsqrt", "epsilon", "6.1e-5"),
        lambda: rsqrt(None),
        lambda: rsqrt(1e-4),
    ),
    Case(
        "dtype.fp16-compute",
        W,
        "y",
        ("fp32",),
        lambda: fp32_compute(False),
        lambda: fp32_compute(True),
    ),
    Case(
        "sdpa.attn-mask",
        E,
        "y",
        ("attn_mask", "[1, 1, 8, 8]"),
        lambda: sdpa(8, 8, mask=True),
        lambda: sdpa(8, 8),
    ),
    Case(
        "sdpa.scale-arg",
        E,
        "y",
        ("scale",),
        lambda: sdpa_scale_arg(True),
        lambda: sdpa_scale_arg(False),
    ),
    Case(
        "sdpa.native-size",
        W,
        "y",
        ("600", "512", "2048"),
        lambda: sdpa(600, 600),
        lambda: sdpa(16, 600),
    ),
    Case(
        "sdpa.native-size", W, "y", ("3000", "2048"), lambda: sdpa(16, 3000), lambda: sdpa(16, 2048)
    ),
    Case(
        "square.fused-nonlinearity",
        W,
        "sq",
        ("width 100", "100 % 128 = 100", "64", "sqrt"),
        lambda: square_then_sqrt(100),
        lambda: square_then_sqrt(64),
    ),
    Case("concat.arity", W, "c", ("3 values", "2"), lambda: concat(3), lambda: concat(2)),
    Case(
        "softmax.pow2",
        W,
        "y",
        ("size 6", "8"),
        lambda: unary((1, 4, 1, 6), "softmax", axis=-1),
        lambda: unary((1, 4, 1, 8), "softmax", axis=-1),
    ),
    Case(
        "broadcast.const-shape",
        E,
        "y",
        ("'w'", "[8]", "[1, 4, 1, 8]", "[1, C, 1, 1]"),
        lambda: broadcast((8,)),
        lambda: broadcast((1, 4, 1, 1)),
    ),
    Case(
        "broadcast.const-shape",
        E,
        "y",
        ("[1, 1, 1, 8]",),
        lambda: broadcast((1, 1, 1, 8)),
        lambda: broadcast((1, 4, 1, 8)),
    ),
    Case(
        "constexpr.blockwise-direct",
        W,
        "w_q",
        ("conv", "'y'"),
        lambda: constexpr_into("constexpr_blockwise_shift_scale", "conv"),
        lambda: constexpr_into("constexpr_affine_dequantize", "conv"),
    ),
    Case(
        "constexpr.lut-reshape",
        W,
        "w_q",
        ("[8, 4, 1, 1]", "[1, 8, 1, 4]", "'w_r'"),
        lambda: constexpr_into("constexpr_lut_to_dense", "reshape"),
        lambda: constexpr_into("constexpr_lut_to_dense", "conv"),
    ),
    Case(
        "io.surface-min",
        W,
        "x",
        ("16 bytes", "16,384", "49,152"),
        lambda: unary((1, 4, 1, 2)),
        lambda: unary((1, 768, 1, 32)),
    ),
    Case(
        "io.wide-short",
        W,
        "x",
        ("C = 1024", "768", "S = 16", "32"),
        lambda: unary((1, 1024, 1, 16)),
        lambda: unary((1, 1024, 1, 32)),
    ),
    Case(
        "io.channel-align",
        A,
        "x",
        ("48 channels", "32", "pad to 64"),
        lambda: unary((1, 48, 1, 32)),
        lambda: unary((1, 64, 1, 32)),
    ),
    Case(
        "io.width-align",
        W,
        "x",
        ("S = 24", "16", "to 32"),
        lambda: unary((1, 32, 1, 24)),
        lambda: unary((1, 32, 1, 32)),
    ),
    Case(
        "io.row-stride",
        A,
        "x",
        ("32 bytes", "64"),
        lambda: unary((1, 32, 1, 16)),
        lambda: unary((1, 32, 1, 32)),
    ),
    Case(
        "io.multi-input",
        A,
        "k",
        ("2 inputs", "0x1d"),
        lambda: two_inputs("a", "k"),
        lambda: unary((1, 32, 1, 32)),
    ),
    Case(
        "io.alphabetical",
        A,
        "q",
        ("(q, k)", "(k, q)"),
        lambda: two_inputs("q", "k"),
        lambda: two_inputs("k", "q"),
    ),
    Case(
        "io.uniform-size",
        A,
        "x",
        ("x=64 B", "y=128 B", "128 bytes"),
        lambda: conv_4_to_8(8),
        lambda: conv_4_to_8(4),
    ),
    Case("io.dtype", W, "x", ("int32",), lambda: int_input(I32), lambda: int_input(F16)),
    Case("io.fp32", A, "x", ("fp32", "37%"), lambda: int_input(F32), lambda: int_input(F16)),
    Case(
        "state.ane-direct",
        W,
        "kv",
        ("no LiveInputList",),
        lambda: read_state((1, 1, 4, 32)),
        lambda: unary((1, 1, 4, 32)),
    ),
    Case("state.ane-direct", W, "kv", ("status 0x2",), update_state, lambda: unary((1, 32, 1, 32))),
    Case(
        "state.align-32",
        W,
        "kv",
        ("8", "32", "#2631"),
        lambda: read_state((1, 1, 4, 8)),
        lambda: read_state((1, 1, 4, 32)),
    ),
    Case(
        "matmul.runtime-inner-32",
        W,
        "m",
        ("20", "32", "silent zeros"),
        lambda: runtime_matmul(20),
        lambda: runtime_matmul(20, const_y=True),
    ),
    Case(
        "matmul.runtime-inner-32",
        W,
        "m",
        ("40", "64"),
        lambda: runtime_matmul(40),
        lambda: runtime_matmul(64),
    ),
    Case(
        "weights.budget",
        W,
        "w2",
        ("192 bytes", "100"),
        lambda: weights((8, 4, 1, 1), (8, 8, 1, 1)),
        lambda: weights((8, 4, 1, 1)),
        PreflightOptions(max_program_weight_bytes=100),
    ),
    # the default budget: the device table's smallest per-program envelope (an iPhone's 1 GiB)
    Case(
        "weights.budget",
        W,
        "w1",
        ("1,073,741,826", "1,073,741,824"),
        lambda: weights((536_870_913,), lazy=True),
        lambda: weights((536_870_912,), lazy=True),
    ),
    Case(
        "weights.max",
        E,
        "w2",
        ("2,147,483,682", "2,147,483,648"),
        lambda: weights((16,), ((1 << 30) + 1,), lazy=True),
        lambda: weights((1 << 30,), lazy=True),
    ),
    Case(
        "sram.working-set",
        A,
        "y",
        ("67,108,864", "32 MiB"),
        lambda: unary((1, 4096, 1, 4096)),
        lambda: unary((1, 2048, 1, 4096)),
    ),
    Case(
        "reduce.channel-sum",
        A,
        "y",
        ("512 channels", "48x", "256"),
        lambda: channel_reduce(512),
        lambda: channel_reduce(256),
    ),
]


def _id(case: Case) -> str:
    return f"{case.rule}:{case.node}:{case.numbers[0]}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_rule_trips(case: Case):
    findings = [f for f in preflight(case.trip(), options=case.options) if f.rule == case.rule]
    assert findings, f"{case.rule} did not fire"
    first = findings[0]
    assert (first.severity, first.node) == (case.severity, case.node)
    for number in case.numbers:
        assert number in first.message, (number, first.message)
    assert first.source


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_nearby_program_passes(case: Case):
    assert case.rule not in {f.rule for f in preflight(case.near(), options=case.options)}


def test_every_program_rule_has_a_case():
    checked = {r.id for r in RULES if r.check is not None}
    assert checked == {c.rule for c in CASES}


def test_table_rules_cite_the_op_they_fired_on():
    """Table-driven rules report the citation of the op's own entry, not the combined one."""
    (gelu,) = [f for f in preflight(one_raw_op("gelu")) if f.rule == "op.reported-failing"]
    assert gelu.source.endswith("mechramc/Orion")
    (gather,) = [f for f in preflight(one_raw_op("gather")) if f.rule == "op.unsupported"]
    assert "aneforge/_capabilities.py" in gather.source and "Orion" not in gather.source


def test_hard_weight_limit_replaces_the_budget_warning():
    findings = preflight(weights((16,), ((1 << 30) + 1,), lazy=True))
    rules = {f.rule for f in findings}
    assert "weights.max" in rules and "weights.budget" not in rules


def test_state_kernels_are_not_counted_as_io_surfaces():
    """A state is reported by the state rules alone; its name is never an I/O finding's node."""
    findings = preflight(read_state((1, 1, 4, 8)))
    assert {f.rule for f in findings if f.node == "kv"} == {"state.ane-direct", "state.align-32"}
