"""Each catalog kernel, executed with fp16 storage semantics, against a float64 formula written here.

The formulas below come from the ops' mathematical definitions, not from the kernels or from
app.reference.definitions. Errors are normwise: max|kernel − exact| / max|exact|. Tolerances
(fp16's unit roundoff u = 2⁻¹¹ ≈ 4.9e-4):
    conv, matmul, scale 2e-3 · identity 1e-3 (exact for fp16 I/O) · rmsnorm 4e-3 · sdpa 5e-3 ·
    gqa_expand, read_state, update_state: bit-exact.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.catalog_build import build_kernel
from app.kernels import CATALOG
from app.mil import Builder, DType
from app.reference import Executor

TOL = {"conv": 2e-3, "matmul": 2e-3, "identity": 1e-3, "scale": 2e-3, "rmsnorm": 4e-3, "sdpa": 5e-3}
FAST = settings(max_examples=25, deadline=None, derandomize=True)


def rel_error(got: np.ndarray, exact: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    assert np.isfinite(got).all(), "the kernel produced inf or NaN"
    return float(np.abs(got - exact).max() / np.abs(exact).max())


def run(op, params, inputs, weights=None, *, seed=0, states=None):
    build = build_kernel(op, params, weights, random_seed=seed)
    executor = Executor.from_written_weights(build.program, states=states)
    return build, executor.run(inputs)


def normal(rng, shape, dtype=np.float16, amp=1.0):
    return (amp * rng.standard_normal(shape)).astype(dtype)


def test_tolerances_here_are_the_ones_verification_reports():
    assert {k: CATALOG[k].tolerance for k in TOL} == TOL


# -- conv / matmul / identity / scale -----------------------------------------------------------


@FAST
@given(
    cin=st.integers(1, 48),
    cout=st.integers(1, 48),
    spatial=st.integers(1, 6),
    bias=st.booleans(),
    io=st.sampled_from(["fp16", "fp32"]),
    seed=st.integers(0, 2**16),
)
def test_conv_is_w_times_x_plus_b(cin, cout, spatial, bias, io, seed):
    rng = np.random.default_rng(seed)
    w = normal(rng, (cout, cin), np.float32, cin**-0.5)
    b = normal(rng, (cout,), np.float32)
    x = normal(rng, (1, cin, 1, spatial), np.float16 if io == "fp16" else np.float32)
    weights = {"weight": w, **({"bias": b} if bias else {})}
    params = {"in_channels": cin, "out_channels": cout, "spatial": spatial, "bias": bias}
    _, result = run("conv", {**params, "io_dtype": io}, {"x": x}, weights)
    exact = np.einsum("oc,cs->os", w.astype(np.float64), x[0, :, 0, :].astype(np.float64))
    if bias:
        exact += b[:, None]
    y = result.outputs["y"]
    assert y.dtype == np.dtype("float16" if io == "fp16" else "float32")
    assert rel_error(y[0, :, 0, :], exact) <= TOL["conv"]


@FAST
@given(
    fin=st.integers(1, 48),
    fout=st.integers(1, 48),
    tokens=st.integers(1, 6),
    dynamic=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matmul_is_w_times_x(fin, fout, tokens, dynamic, seed):
    rng = np.random.default_rng(seed)
    w = normal(rng, (fout, fin), np.float16, fin**-0.5)
    x = normal(rng, (1, fin, 1, tokens))
    params = {"in_features": fin, "out_features": fout, "tokens": tokens, "dynamic": dynamic}
    inputs = {"x": x, **({"w": w} if dynamic else {})}
    _, result = run("matmul", params, inputs, None if dynamic else {"weight": w})
    exact = w.astype(np.float64) @ x[0, :, 0, :].astype(np.float64)
    assert rel_error(result.outputs["y"][0, :, 0, :], exact) <= TOL["matmul"]


@pytest.mark.parametrize("io", ["fp16", "fp32"])
def test_identity_returns_x(io):
    rng = np.random.default_rng(1)
    x = normal(rng, (1, 24, 1, 5), np.float16 if io == "fp16" else np.float32, amp=300)
    _, result = run("identity", {"channels": 24, "spatial": 5, "io_dtype": io}, {"x": x})
    # fp16 I/O: bit-exact; fp32 I/O: exactly x rounded once to fp16 (the cast in), within 1e-3
    np.testing.assert_array_equal(result.outputs["y"], x.astype(np.float16).astype(x.dtype))
    assert rel_error(result.outputs["y"], x.astype(np.float64)) <= TOL["identity"]


@FAST
@given(channels=st.integers(1, 40), spatial=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_scale_multiplies_each_channel(channels, spatial, seed):
    rng = np.random.default_rng(seed)
    s = normal(rng, (channels,), np.float32) + 1
    x = normal(rng, (1, channels, 1, spatial))
    _, result = run("scale", {"channels": channels, "spatial": spatial}, {"x": x}, {"scale": s})
    y = result.outputs["y"]
    exact = x.astype(np.float64) * s.astype(np.float64)[None, :, None, None]
    assert rel_error(y, exact) <= TOL["scale"]
    # and it is one correctly rounded product of the fp16 operands, nothing more
    s16 = s.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(
        y, (x.astype(np.float64) * s16[None, :, None, None]).astype(np.float16)
    )


# -- rmsnorm ------------------------------------------------------------------------------------


def rmsnorm_exact(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    rms = np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)
    return x / rms * w.astype(np.float64).reshape(1, -1, 1, 1)


VARIANTS = ["safe", "l2norm"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-4, 1e-3, 1e-2])
@pytest.mark.parametrize("amp", [0.03, 1.0, 200.0])
def test_rmsnorm_matches_the_formula_for_each_eps(variant, eps, amp):
    rng = np.random.default_rng(7)
    c, s = 48, 6
    w = normal(rng, (c,), np.float32, 0.1) + 1
    x = normal(rng, (1, c, 1, s), amp=amp)
    params = {"channels": c, "spatial": s, "eps": eps, "variant": variant}
    _, result = run("rmsnorm", params, {"x": x}, {"weight": w})
    assert not result.anomalies
    assert rel_error(result.outputs["y"], rmsnorm_exact(x, w, eps)) <= TOL["rmsnorm"]


def test_eps_changes_the_answer_where_it_should():
    # mean(x²) ≈ 1e-3 here: eps = 1e-2 dominates it, eps = 1e-6 does not; both must be honoured
    rng = np.random.default_rng(3)
    x = normal(rng, (1, 32, 1, 4), amp=0.03)
    w = np.ones(32, np.float32)
    ys = {}
    for eps in (1e-6, 1e-2):
        _, result = run(
            "rmsnorm", {"channels": 32, "spatial": 4, "eps": eps}, {"x": x}, {"weight": w}
        )
        ys[eps] = result.outputs["y"]
        assert rel_error(ys[eps], rmsnorm_exact(x, w, eps)) <= TOL["rmsnorm"]
    assert np.abs(ys[1e-2].astype(float)).max() < 0.5 * np.abs(ys[1e-6].astype(float)).max()


def large_activations(rng, c, s, peak=60000.0):
    """Columns whose largest |x| is `peak` (x² overflows fp16 from |x| > 256)."""
    x = rng.standard_normal((1, c, 1, s))
    x *= peak / np.abs(x).max(axis=1, keepdims=True)
    return x.astype(np.float16)


@pytest.mark.parametrize("variant", VARIANTS)
@FAST
@given(c=st.integers(2, 64), s=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_rmsnorm_survives_activations_up_to_60000(variant, c, s, seed):
    rng = np.random.default_rng(seed)
    x = large_activations(rng, c, s)
    w = normal(rng, (c,), np.float32, 0.1) + 1
    _, result = run(
        "rmsnorm", {"channels": c, "spatial": s, "variant": variant}, {"x": x}, {"weight": w}
    )
    assert not result.overflowed and not result.produced_nan
    assert rel_error(result.outputs["y"], rmsnorm_exact(x, w, 1e-5)) <= TOL["rmsnorm"]


def plain_rmsnorm(c: int, s: int, eps: float, w: np.ndarray):
    """The textbook decomposition: square x first. Built here to show why the kernel does not."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, c, 1, s))
    axes, keep = b.const("axes", [1]), b.const("keep_dims", True)
    mean_sq = b.op("reduce_mean", "mean_sq", x=b.op("square", "sq", x=x), axes=axes, keep_dims=keep)
    rms = b.op("sqrt", "rms", x=b.op("add", "mean_sq_eps", x=mean_sq, y=eps))
    normed = b.op("real_div", "normed", x=x, y=rms)
    return b.build(
        [b.op("mul", "y", x=normed, y=b.const("weight", w.reshape(1, c, 1, 1), DType.FP16))]
    )


def test_plain_rmsnorm_overflows_fp16_where_the_kernel_does_not():
    rng = np.random.default_rng(11)
    c, s = 32, 4
    x = large_activations(rng, c, s)
    w = np.ones(c, np.float32)
    exact = rmsnorm_exact(x, w, 1e-5)

    plain = Executor.from_written_weights(plain_rmsnorm(c, s, 1e-5, w)).run({"x": x})
    assert plain.overflowed
    assert plain.anomalies[0].op == "sq" and plain.anomalies[0].kind == "overflow"
    assert np.abs(plain.outputs["y"].astype(np.float64) - exact).max() > 0.5  # the answer is lost

    _, safe = run("rmsnorm", {"channels": c, "spatial": s}, {"x": x}, {"weight": w})
    assert not safe.anomalies
    assert rel_error(safe.outputs["y"], exact) <= TOL["rmsnorm"]

    # below |x| = 256 the plain program is fine too: the failure above is fp16 overflow, not a bug
    small = (x.astype(np.float64) / 60000 * 200).astype(np.float16)
    ok = Executor.from_written_weights(plain_rmsnorm(c, s, 1e-5, w)).run({"x": small})
    assert not ok.anomalies
    assert rel_error(ok.outputs["y"], rmsnorm_exact(small, w, 1e-5)) <= TOL["rmsnorm"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rmsnorm_of_an_all_zero_row_is_zero_not_nan(variant, eps):
    rng = np.random.default_rng(5)
    x = normal(rng, (1, 16, 1, 4))
    x[:, :, :, 1] = 0  # one all-zero position
    x[:, :, :, 3] = 0
    w = normal(rng, (16,), np.float32, 0.1) + 1
    params = {"channels": 16, "spatial": 4, "eps": eps, "variant": variant}
    _, result = run("rmsnorm", params, {"x": x}, {"weight": w})
    y = result.outputs["y"]
    assert not result.anomalies
    assert np.array_equal(y[:, :, :, [1, 3]], np.zeros((1, 16, 1, 2), np.float16))
    assert rel_error(y, rmsnorm_exact(x, w, eps)) <= TOL["rmsnorm"]


# -- sdpa ---------------------------------------------------------------------------------------


def attention_exact(q, k, v, scale, causal):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s, kv = q.shape[-2], k.shape[-2]
        i, j = np.arange(s)[:, None], np.arange(kv)[None, :]
        scores = np.where(
            j <= kv - s + i, scores, -np.inf
        )  # queries are the last s of kv positions
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def sdpa_case(rng, heads, d, seq, kv, causal, scale=None):
    params = {"n_heads": heads, "head_dim": d, "seq_len": seq, "kv_seq_len": kv, "causal": causal}
    if scale is not None:
        params["scale"] = scale
    q = normal(rng, (1, heads, seq, d))
    k = normal(rng, (1, heads, kv, d))
    v = normal(rng, (1, heads, kv, d))
    _, result = run("sdpa", params, {"q": q, "k": k, "v": v})
    factor = scale if scale is not None else d**-0.5
    return result, attention_exact(q, k, v, factor, causal)


@FAST
@given(
    heads=st.integers(1, 3),
    d=st.sampled_from([4, 8, 16, 32]),
    seq=st.integers(1, 8),
    extra=st.integers(0, 8),
    scale=st.sampled_from([None, 0.25, 1.0]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sdpa_is_softmax_attention(heads, d, seq, extra, scale, causal, seed):
    """Causal (kv_seq_len >= seq_len) or not (kv_seq_len = seq_len + extra here as well)."""
    rng = np.random.default_rng(seed)
    result, exact = sdpa_case(rng, heads, d, seq, seq + extra, causal, scale)
    assert rel_error(result.outputs["y"], exact) <= TOL["sdpa"]


def test_causal_queries_are_the_last_positions():
    """With v = one-hot positions, y[i] are the attention weights: query i may only attend keys
    j <= kv_len - seq_len + i, and those weights are exactly 0 in fp16."""
    seq, kv = 3, 7
    rng = np.random.default_rng(2)
    q = normal(rng, (1, 1, seq, kv))
    k = normal(rng, (1, 1, kv, kv))
    v = np.eye(kv, dtype=np.float16).reshape(1, 1, kv, kv)
    params = {"n_heads": 1, "head_dim": kv, "seq_len": seq, "kv_seq_len": kv, "causal": True}
    _, result = run("sdpa", params, {"q": q, "k": k, "v": v})
    weights = result.outputs["y"][0, 0].astype(np.float64)
    for i in range(seq):
        visible = kv - seq + i + 1
        assert (weights[i, visible:] == 0).all()
        assert (weights[i, :visible] > 0).all()
        assert abs(weights[i].sum() - 1) < 4e-3


# The iOS18 op divides Q·Kᵀ by sqrt(head_dim) itself (coremltools' definition); the kernel
# compensates, so the program computes softmax(Q·Kᵀ·scale)·V for any scale.
@pytest.mark.parametrize(
    ("heads", "d", "seq", "kv", "scale"),
    [(2, 16, 4, 4, None), (1, 8, 3, 6, 0.5), (2, 4, 5, 2, 1.0)],
)
def test_non_causal_sdpa_is_softmax_attention(heads, d, seq, kv, scale):
    result, exact = sdpa_case(np.random.default_rng(4), heads, d, seq, kv, False, scale)
    assert rel_error(result.outputs["y"], exact) <= TOL["sdpa"]


# -- gqa_expand ---------------------------------------------------------------------------------


@FAST
@given(
    kv=st.integers(1, 4),
    group=st.integers(1, 4),
    d=st.integers(1, 6),
    seq=st.integers(1, 4),
    order=st.sampled_from(["repeat_kv", "tile"]),
)
def test_gqa_expand_head_order(kv, group, d, seq, order):
    q_heads = kv * group
    x = normal(np.random.default_rng(kv * 100 + group), (1, kv, seq, d))
    params = {"kv_heads": kv, "q_heads": q_heads, "head_dim": d, "seq_len": seq, "order": order}
    _, result = run("gqa_expand", params, {"x": x})
    y = result.outputs["y"]
    assert y.shape == (1, q_heads, seq, d)
    for h in range(q_heads):
        source = h // group if order == "repeat_kv" else h % kv
        np.testing.assert_array_equal(y[:, h], x[:, source])


# -- read_state / update_state ------------------------------------------------------------------


def test_state_updates_and_reads_behave_like_a_buffer():
    shape = [1, 2, 3, 4]
    buffers: dict[str, np.ndarray] = {}  # one state object shared by both programs
    update = build_kernel("update_state", {"state_name": "kv", "shape": shape})
    read = build_kernel("read_state", {"state_name": "kv", "shape": shape})
    updater = Executor.from_written_weights(update.program, states=buffers)
    reader = Executor.from_written_weights(read.program, states=buffers)

    np.testing.assert_array_equal(reader.run({}).outputs["y"], np.zeros(shape, np.float16))
    rng = np.random.default_rng(0)
    history = [normal(rng, shape) for _ in range(3)]
    for value in history:
        y = updater.run({"value": value}).outputs["y"]
        np.testing.assert_array_equal(y, value)  # update reads back what it wrote
        np.testing.assert_array_equal(reader.run({}).outputs["y"], value)
        np.testing.assert_array_equal(reader.run({}).outputs["y"], value)  # reads do not consume
    np.testing.assert_array_equal(buffers["kv"], history[-1])

    # a state given by name sets the buffer's contents before the call
    start = normal(rng, shape)
    np.testing.assert_array_equal(reader.run({"kv": start}).outputs["y"], start)
    np.testing.assert_array_equal(buffers["kv"], start)
