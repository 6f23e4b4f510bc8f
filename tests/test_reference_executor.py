"""The reference executor itself: op coverage and semantics, fp16 storage, overflow records,
weights read from weight.bin, and input errors."""

import io

import numpy as np
import pytest

from app.catalog_build import build_kernel
from app.errors import RequestError
from app.mil import Builder, DType, ops
from app.packaging import plan_weights
from app.reference import Executor

F16, F32 = DType.FP16, DType.FP32


def test_every_builder_op_has_a_reference():
    assert all(record.meaning is not None for record in ops.built())


def one_op(op_type, dtype=F32, shapes=((2, 3),), names=("x",), **args):
    """A program of one op over fresh inputs; returns (program, inputs)."""
    b = Builder("ios18")
    rng = np.random.default_rng(0)
    params, inputs = {}, {}
    for name, shape in zip(names, shapes, strict=True):
        params[name] = b.input(name, dtype, shape)
        inputs[name] = rng.standard_normal(shape).astype(dtype.numpy)
    return b.build([b.op(op_type, "out", **params, **args)]), inputs


def run_one(op_type, dtype=F32, shapes=((2, 3),), names=("x",), **args):
    program, inputs = one_op(op_type, dtype, shapes, names, **args)
    return Executor(program).run(inputs).outputs["out"], inputs


X34 = {"shapes": ((3, 4),)}
XY = {"shapes": ((3, 4), (1, 4)), "names": ("x", "y")}

CASES = [
    ("add", XY, lambda x, y: x + y),
    ("sub", XY, lambda x, y: x - y),
    ("mul", XY, lambda x, y: x * y),
    ("real_div", XY, lambda x, y: x / y),
    ("maximum", XY, np.maximum),
    ("minimum", XY, np.minimum),
    ("abs", X34, np.abs),
    ("square", X34, np.square),
    ("reduce_max", {**X34, "axes": [1], "keep_dims": True}, lambda x: x.max(1, keepdims=True)),
    ("reduce_sum", {**X34, "axes": [0]}, lambda x: x.sum(0)),
    ("reduce_mean", X34, lambda x: np.array(x.mean())),
    ("reduce_l2_norm", {**X34, "axes": [-1]}, lambda x: np.sqrt((x * x).sum(-1))),
    ("softmax", {**X34, "axis": 0}, lambda x: np.exp(x) / np.exp(x).sum(0)),
    ("transpose", {**X34, "perm": [1, 0]}, lambda x: x.T),
    ("reshape", {**X34, "shape": [2, -1]}, lambda x: x.reshape(2, 6)),
    ("tile", {**X34, "reps": [2, 1]}, lambda x: np.concatenate([x, x])),
    ("slice_by_size", {**X34, "begin": [1, -3], "size": [2, -1]}, lambda x: x[1:3, 1:]),
    ("expand_dims", {**X34, "axes": [0, -1]}, lambda x: x[None, :, :, None]),
    ("squeeze", {"shapes": ((1, 3, 1),)}, lambda x: x.reshape(3)),
    ("squeeze", {"shapes": ((1, 3, 1),), "axes": [2]}, lambda x: x.reshape(1, 3)),
    (
        "matmul",
        {"shapes": ((2, 3, 4), (2, 5, 4)), "names": ("x", "y"), "transpose_y": True},
        lambda x, y: x @ np.swapaxes(y, 1, 2),
    ),
]


@pytest.mark.parametrize(("op_type", "spec", "expected"), CASES, ids=[c[0] for c in CASES])
def test_op_semantics_in_fp32(op_type, spec, expected):
    spec = dict(spec)
    shapes, names = spec.pop("shapes"), spec.pop("names", ("x",))
    y, inputs = run_one(op_type, F32, shapes, names, **spec)
    want = expected(*(inputs[n].astype(np.float64) for n in names))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)


def test_rsqrt_cast_and_concat():
    b = Builder("ios18")
    x = b.input("x", F32, (2, 2))
    r = b.op("rsqrt", "r", x=b.op("abs", "a", x=x), epsilon=0.5)
    to_int = b.op("cast", "i", x=b.op("mul", "m", x=x, y=10.0), dtype="int32")
    flag = b.op("cast", "flag", x=x, dtype="bool")
    inter = b.op("concat", "inter", values=(x, r), axis=0, interleave=True)
    plain = b.op("concat", "plain", values=(x, r), axis=1)
    program = b.build([r, to_int, flag, inter, plain])
    x_val = np.array([[1.5, -0.25], [0.0, 4.0]], np.float32)
    out = Executor(program).run({"x": x_val}).outputs
    np.testing.assert_allclose(out["r"], 1 / np.sqrt(np.abs(x_val) + 0.5), rtol=1e-6)
    np.testing.assert_array_equal(out["i"], np.array([[15, -2], [0, 40]], np.int32))
    np.testing.assert_array_equal(out["flag"], x_val != 0)
    np.testing.assert_array_equal(out["inter"], np.stack([x_val, out["r"]], 1).reshape(4, 2))
    np.testing.assert_array_equal(out["plain"], np.concatenate([x_val, out["r"]], 1))


def naive_conv(x, w, b, strides, pads, dil, groups):
    """Direct loops over the convolution sum (2-D), for checking the vectorised reference."""
    x = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])])
    n, _, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    oh = (h - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, cout, oh, ow))
    per_group = cout // groups
    for o in range(cout):
        g = o // per_group
        for i in range(oh):
            for j in range(ow):
                for c in range(cg):
                    for p in range(kh):
                        for q in range(kw):
                            y[0, o, i, j] += (
                                w[o, c, p, q]
                                * x[
                                    0,
                                    g * cg + c,
                                    i * strides[0] + p * dil[0],
                                    j * strides[1] + q * dil[1],
                                ]
                            )
        if b is not None:
            y[0, o] += b[o]
    return y


@pytest.mark.parametrize(
    ("pad_type", "pad", "strides", "dil", "groups", "bias"),
    [
        ("valid", None, [1, 1], [1, 1], 1, False),
        ("custom", [1, 0, 2, 1], [2, 1], [1, 2], 2, True),
        ("same", None, [2, 2], [1, 1], 1, True),
        ("same", None, [1, 1], [2, 1], 4, False),
    ],
)
def test_general_conv_matches_direct_loops(pad_type, pad, strides, dil, groups, bias):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((8, 4 // groups, 3, 2)).astype(np.float32)
    bias_v = rng.standard_normal(8).astype(np.float32)
    b = Builder("ios18")
    xv = b.input("x", F32, x.shape)
    args = {"strides": strides, "dilations": dil, "groups": groups, "pad_type": pad_type}
    if pad is not None:
        args["pad"] = pad
    y = b.op(
        "conv",
        "y",
        x=xv,
        weight=b.const("w", w),
        bias=b.const("b", bias_v) if bias else None,
        **args,
    )
    out = Executor(b.build([y])).run({"x": x}).outputs["y"]
    if pad_type == "same":  # total padding split with the extra element after (coremltools)
        pads = []
        for size, k, s, d in zip(x.shape[2:], w.shape[2:], strides, dil, strict=True):
            total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
            pads += [total // 2, total - total // 2]
    else:
        pads = pad or [0, 0, 0, 0]
    want = naive_conv(x, w, bias_v if bias else None, strides, pads, dil, groups)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_sdpa_op_divides_by_sqrt_of_the_embedding():
    """The MIL op's own definition (coremltools iOS18 transformers.py): softmax(QKᵀ/√E + mask)·V."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, n, 8)).astype(np.float32) for n in (3, 5, 5))
    mask = np.array([True, True, False, True, False])
    b = Builder("ios18")
    args = {n: b.input(n, F32, a.shape) for n, a in (("query", q), ("key", k), ("value", v))}
    y = b.op("scaled_dot_product_attention", "y", **args, attn_mask=b.const("m", mask))
    out = Executor(b.build([y])).run({"query": q, "key": k, "value": v}).outputs["y"]
    scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    scores[..., ~mask] = -np.inf
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


def test_fp16_results_are_rounded_after_every_op():
    # 2048 + 1 is not an fp16 number: an fp16 add stores 2048, and the next op sees 2048
    for dtype, want in ((F16, 0.0), (F32, 1.0)):
        b = Builder("ios18")
        x = b.input("x", dtype, (1,))
        s = b.op("add", "s", x=x, y=1.0)
        y = b.op("sub", "y", x=s, y=x)
        out = Executor(b.build([y])).run({"x": np.array([2048.0])})
        assert out.outputs["y"].dtype == dtype.numpy
        assert out.outputs["y"][0] == want


def overflow_program(with_nan: bool):
    b = Builder("ios18")
    x = b.input("x", F16, (4,))
    sq = b.op("square", "sq", x=x)  # 300² = 90000 > 65504: inf in fp16
    outputs = [b.op("add", "doubled", x=sq, y=sq)]  # inherits the inf: not a new overflow
    if with_nan:
        zero = b.op("sub", "zero", x=x, y=x)
        outputs.append(b.op("real_div", "ratio", x=zero, y=zero))  # 0/0
    return b.build(outputs)


def test_overflow_and_nan_are_recorded_where_they_start():
    x = np.array([1, 300, -300, 2], np.float16)
    result = Executor(overflow_program(True)).run({"x": x})
    assert [(a.op, a.kind, a.count, a.dtype) for a in result.anomalies] == [
        ("sq", "overflow", 2, "fp16"),
        ("ratio", "nan", 4, "fp16"),
    ]
    assert result.overflowed and result.produced_nan
    clean = Executor(overflow_program(False)).run({"x": np.array([1, 100, -100, 2], np.float16)})
    assert clean.anomalies == [] and not clean.overflowed and not clean.produced_nan


def two_blob_program():
    """y = x·a + b with two same-shaped blob consts (a ≠ b)."""
    b = Builder("ios18")
    x = b.input("x", F16, (16,))
    a = b.const("a", np.linspace(1, 2, 16, dtype=np.float32), F16)
    c = b.const("c", np.linspace(-5, 5, 16, dtype=np.float32), F16)
    return b.build([b.op("add", "y", x=b.op("mul", "ax", x=x, y=a), y=c)])


def written(program):
    writer, offsets = plan_weights(program)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue(), offsets


def test_blob_consts_come_from_weight_bin():
    program = two_blob_program()
    data, offsets = written(program)
    x = {"x": np.full(16, 2, np.float16)}
    want = (2 * np.linspace(1, 2, 16) + np.linspace(-5, 5, 16)).astype(np.float16)
    good = Executor(program, weights=data, offsets=offsets).run(x).outputs["y"]
    np.testing.assert_allclose(good.astype(float), want.astype(float), atol=4e-3)

    # swapped offsets: both fit, the answer changes (x·c + a)
    swapped = {"a": offsets["c"], "c": offsets["a"]}
    wrong = Executor(program, weights=data, offsets=swapped).run(x).outputs["y"]
    assert not np.allclose(wrong.astype(float), want.astype(float), atol=0.1)

    # a changed byte in the file changes the answer: values are not taken from memory
    tampered = bytearray(data)
    tampered[offsets["c"] + 64 + 1] ^= 0x40
    changed = Executor(program, weights=bytes(tampered), offsets=offsets).run(x).outputs["y"]
    assert changed[0] != good[0]

    # an offset that is not an entry is an error naming the const
    with pytest.raises(RequestError, match=r"weights\.c") as err:
        Executor(program, weights=data, offsets={**offsets, "c": offsets["a"] + 64})
    assert "sentinel" in str(err.value).lower()


def test_a_blob_read_with_the_wrong_dtype_fails():
    """An fp16 const pointed at an fp32 entry of weight.bin (same name, same offset)."""
    b = Builder("ios18")
    x = b.input("x", F32, (16,))
    program = b.build([b.op("mul", "y", x=x, y=b.const("w", np.arange(16, dtype=np.float32), F32))])
    data, offsets = written(program)
    b16 = Builder("ios18")
    x16 = b16.input("x", F16, (16,))
    w16 = b16.const("w", np.arange(16, dtype=np.float16), F16)
    twin = b16.build([b16.op("mul", "y", x=x16, y=w16)])
    with pytest.raises(RequestError, match=r"weights\.w: .*does not match requested type"):
        Executor(twin, weights=data, offsets=offsets)


def test_input_errors_name_the_input():
    program = build_kernel("rmsnorm", {"channels": 4, "spatial": 2}, random_seed=0).program
    ex = Executor.from_written_weights(program)
    cases = [
        ({}, "inputs.x: missing input of shape [1, 4, 1, 2] (fp16)"),
        (
            {"x": np.zeros((1, 4, 1, 2)), "z": np.zeros(1)},
            "inputs.z: unknown input; this program takes x",
        ),
        ({"x": np.zeros((1, 4, 2))}, "inputs.x: expected shape [1, 4, 1, 2], received [1, 4, 2]"),
        (
            {"x": np.array([["a"] * 2] * 4).reshape(1, 4, 1, 2)},
            "inputs.x: dtype <U1 is not a number",
        ),
        ({"x": np.full((1, 4, 1, 2), 1e5)}, "inputs.x: has values beyond ±65504"),
    ]
    for inputs, message in cases:
        with pytest.raises(RequestError) as err:
            ex.run(inputs)
        assert str(err.value).startswith(message)


def test_intermediates_are_kept_only_on_request():
    program = build_kernel("rmsnorm", {"channels": 4, "spatial": 2}, random_seed=0).program
    x = {"x": np.ones((1, 4, 1, 2), np.float16)}
    ex = Executor.from_written_weights(program)
    assert ex.run(x).values is None
    kept = ex.run(x, keep=True).values
    assert kept is not None and kept["m"].shape == (1, 1, 1, 2) and float(kept["m"].max()) == 1.0
