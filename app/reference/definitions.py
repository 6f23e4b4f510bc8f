"""What each catalog op means, in float64, written from the math and not from the kernels' MIL.

Each definition takes the op's params, its inputs and states (as the kernel sees them) and its
weights (as the user gave them, before fp16 storage) and returns the exact outputs and the states
after the call. The kernels' fp16 programs are judged against these.

Error measure (used in verification.json, the tests and the README): for each output,
    max_rel_error = max|kernel − exact| / max|exact|
a normwise relative error: an fp16 result correct to a few units in the last place scores ~1e-3;
a wrong formula scores ~1. `TOLERANCE` holds the bound each op must meet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from app.schemas import OpParams

Arrays = Mapping[str, np.ndarray]
Definition = Callable[[OpParams, Arrays, Arrays, Arrays], tuple[dict, dict]]

# Normwise relative error bounds per op. fp16's unit roundoff is u = 2⁻¹¹ ≈ 4.9e-4: one rounding
# costs ≤ u, each further op of a chain about one more. The worst errors of a seeded sweep over
# random shapes (`python -m app.reference.sweep`) sit at 23–44% of these bounds.
TOLERANCE: dict[str, float] = {
    "conv": 2e-3,  # fp16 weights, fp16 output: worst 4.8e-4
    "matmul": 2e-3,  # as conv (static or runtime W): worst 5.4e-4
    "identity": 1e-3,  # exact for fp16 I/O; fp32 I/O pays one cast to fp16: worst 4.4e-4
    "scale": 2e-3,  # fp16 scale × fp16 x, one rounding: worst 6.4e-4
    "rmsnorm": 4e-3,  # ten chained fp16 ops, |x| to 60000, eps 1e-6..1e-2: worst 1.5e-3
    "sdpa": 5e-3,  # fp16 scores, probabilities and output: worst 1.1e-3
    "gqa_expand": 0.0,  # data movement: bit-exact
    "read_state": 0.0,
    "update_state": 0.0,
}


def f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _channels_by_tokens(x: np.ndarray) -> np.ndarray:
    """[1, C, 1, S] (the ANE layout) -> [C, S]."""
    return f64(x)[0, :, 0, :]


def _ane(y: np.ndarray) -> np.ndarray:
    """[C, S] -> [1, C, 1, S]."""
    return y[None, :, None, :]


def conv(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[o, s] = Σ_c W[o, c]·x[c, s] + b[o]."""
    w = f64(weights["weight"]).reshape(p.out_channels, p.in_channels)
    y = w @ _channels_by_tokens(inputs["x"])
    if p.bias:
        y = y + f64(weights["bias"])[:, None]
    return {"y": _ane(y)}, {}


def matmul(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[:, t] = W·x[:, t] for each token t, W static or the runtime input `w`."""
    w = inputs["w"] if p.dynamic else weights["weight"]
    w = f64(w).reshape(p.out_features, p.in_features)
    return {"y": _ane(w @ _channels_by_tokens(inputs["x"]))}, {}


def identity(p, inputs: Arrays, weights: Arrays, states: Arrays):
    return {"y": f64(inputs["x"])}, {}


def scale(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[c, s] = x[c, s]·scale[c]."""
    s = f64(weights["scale"]).reshape(p.channels)
    return {"y": _ane(_channels_by_tokens(inputs["x"]) * s[:, None])}, {}


def rmsnorm(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """y[c, s] = x[c, s] / sqrt(mean_c x[c, s]² + eps)·w[c]; both variants mean the same."""
    x = _channels_by_tokens(inputs["x"])
    w = f64(weights["weight"]).reshape(p.channels)
    rms = np.sqrt(np.mean(x * x, axis=0) + p.eps)
    return {"y": _ane(x / rms[None, :] * w[:, None])}, {}


def sdpa(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """softmax(Q·Kᵀ·scale)·V per head; causal: query i (the last seq_len of kv_len positions)
    sees keys j <= kv_len − seq_len + i."""
    q, k, v = f64(inputs["q"]), f64(inputs["k"]), f64(inputs["v"])
    factor = p.scale if p.scale is not None else 1 / np.sqrt(p.head_dim)
    scores = np.einsum("bhid,bhjd->bhij", q, k) * factor
    if p.causal:
        seen = np.arange(p.kv_len)[None, :] <= np.arange(p.seq_len)[:, None] + p.kv_len - p.seq_len
        scores = np.where(seen, scores, -np.inf)
    weights_ = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights_ /= weights_.sum(axis=-1, keepdims=True)
    return {"y": np.einsum("bhij,bhjd->bhid", weights_, v)}, {}


def gqa_expand(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """Query head h reads kv head h // (q/kv) (repeat_kv) or h % kv (tile)."""
    heads = np.arange(p.q_heads)
    group = p.q_heads // p.kv_heads
    source = heads // group if p.order == "repeat_kv" else heads % p.kv_heads
    return {"y": f64(inputs["x"])[:, source]}, {}


def read_state(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """y is the buffer; the buffer is unchanged."""
    buffer = f64(states[p.state_name])
    return {"y": buffer}, {p.state_name: buffer}


def update_state(p, inputs: Arrays, weights: Arrays, states: Arrays):
    """The buffer becomes `value`; y reads it back."""
    value = f64(inputs["value"])
    return {"y": value}, {p.state_name: value}


DEFINITIONS: dict[str, Definition] = {
    "conv": conv,
    "matmul": matmul,
    "identity": identity,
    "scale": scale,
    "rmsnorm": rmsnorm,
    "sdpa": sdpa,
    "gqa_expand": gqa_expand,
    "read_state": read_state,
    "update_state": update_state,
}


def max_errors(got: np.ndarray, exact: np.ndarray) -> tuple[float, float, float]:
    """(max abs error, normwise relative error, max |exact|); non-finite results give inf."""
    got64, exact = f64(got), f64(exact)
    if not np.isfinite(got64).all():
        return float("inf"), float("inf"), float(np.abs(exact).max(initial=0.0))
    err = float(np.abs(got64 - exact).max(initial=0.0))
    scale_ = float(np.abs(exact).max(initial=0.0))
    rel = err / scale_ if scale_ > 0 else (0.0 if err == 0 else float("inf"))
    return err, rel, scale_
