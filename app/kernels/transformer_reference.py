"""What the transformer-block ops mean, in float64, written from the Hugging Face Llama semantics
(not from the programs):

- RMSNorm: y = x / sqrt(mean(x²) + eps) · w over the hidden axis, per token;
- the gated MLP: down(act(gate(x)) · up(x)), act SiLU (or GELU with the tanh approximation, or
  ReLU²);
- attention: q, k, v = projections of the normed input (+ biases), per head; RoPE with the
  `rotate_half` layout on q and k; each query head h reads key/value head h // (heads / kv_heads)
  (`repeat_kv`); Qwen3 norms each q and k head over head_dim before RoPE; scores
  q·kᵀ / sqrt(head_dim), a query sees keys at positions up to its own
  (causal) and the valid cache rows; softmax; the heads concatenated head-major; o projection;
  the input added back (the residual).

Tokens are rows here ([S, hidden], the checkpoint's orientation); the ops' inputs and outputs use
the ANE layout [1, C, 1, S] (activations) and [1, kv_heads, S, head_dim] (keys and values, as
Hugging Face caches hold them).
"""

from __future__ import annotations

import numpy as np

from app.kernels.common import f64
from app.kernels.op import Arrays
from app.kernels.rope import tables
from app.kernels.transformer_params import AttentionParams, MLPParams


def tokens(x: np.ndarray) -> np.ndarray:
    """[1, C, 1, S] -> [S, C] in float64."""
    return f64(x)[0, :, 0, :].T


def ane(rows: np.ndarray) -> np.ndarray:
    """[S, C] -> [1, C, 1, S]."""
    return rows.T[None, :, None, :]


def matrix(weights: Arrays, name: str) -> np.ndarray:
    """A projection's [out, in] matrix, whichever layout it came in."""
    w = f64(weights[name])
    return w.reshape(w.shape[0], -1)


def rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    gain = f64(gain).reshape(-1)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


ACTIVATIONS = {
    "silu": lambda g: g / (1 + np.exp(-g)),
    "gelu_tanh": lambda g: 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3))),
    "relu2": lambda g: np.maximum(g, 0) ** 2,
}


def mlp(p: MLPParams, x: np.ndarray, w: Arrays, prefix: str, norm: bool, residual: bool):
    """The gated MLP on token rows x [S, hidden], with its pre-norm and residual when asked."""
    h = rms_norm(x, w[f"{prefix}post_attention_layernorm.weight"], p.rms_norm_eps) if norm else x
    gate = h @ matrix(w, f"{prefix}mlp.gate_proj.weight").T
    up = h @ matrix(w, f"{prefix}mlp.up_proj.weight").T
    out = (ACTIVATIONS[p.hidden_act](gate) * up) @ matrix(w, f"{prefix}mlp.down_proj.weight").T
    return x + out if residual else out


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE on [heads, S, head_dim] with cos, sin [S, head_dim]: x·cos + rotate_half(x)·sin."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def _project(x: np.ndarray, w: Arrays, name: str, bias: bool, heads: int) -> np.ndarray:
    """x [S, hidden] projected and split into heads: [heads, S, head_dim]."""
    y = x @ matrix(w, f"{name}.weight").T
    if bias:
        y = y + f64(w[f"{name}.bias"])
    return y.reshape(x.shape[0], heads, -1).transpose(1, 0, 2)


def attention(
    p: AttentionParams,
    x: np.ndarray,
    w: Arrays,
    prefix: str,
    cos: np.ndarray,
    sin: np.ndarray,
    past: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The attention block on token rows x [S, hidden] at positions whose RoPE tables are
    cos, sin [S, head_dim], after the `past` keys and values [kv_heads, L, head_dim] (already
    rotated, all visible to every new token). Returns (x + attention, new k, new v), the new
    keys rotated, each [kv_heads, S, head_dim]."""
    a = f"{prefix}self_attn."
    h = rms_norm(x, w[f"{prefix}input_layernorm.weight"], p.rms_norm_eps)
    q = _project(h, w, f"{a}q_proj", p.attention_bias, p.heads)
    k = _project(h, w, f"{a}k_proj", p.attention_bias, p.kv_heads)
    if p.qk_norm:  # Qwen3: every head normed over head_dim before RoPE
        q = rms_norm(q, w[f"{a}q_norm.weight"], p.rms_norm_eps)
        k = rms_norm(k, w[f"{a}k_norm.weight"], p.rms_norm_eps)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    v = _project(h, w, f"{a}v_proj", p.attention_bias, p.kv_heads)
    keys, values = k, v
    if past is not None:
        keys = np.concatenate([past[0], k], axis=1)
        values = np.concatenate([past[1], v], axis=1)
    group = p.heads // p.kv_heads
    keys, values = np.repeat(keys, group, axis=0), np.repeat(values, group, axis=0)  # repeat_kv
    scores = q @ keys.transpose(0, 2, 1) / np.sqrt(p.dim)
    seen = keys.shape[1] - x.shape[0]  # the past: visible to every new token
    visible = np.arange(keys.shape[1])[None, :] <= seen + np.arange(x.shape[0])[:, None]
    scores = np.where(visible, scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    context = (probs @ values).transpose(1, 0, 2).reshape(x.shape[0], -1)  # head-major
    out = context @ matrix(w, f"{a}o_proj.weight").T
    if p.has_o_bias:
        out = out + f64(w[f"{a}o_proj.bias"])
    return x + out, k, v


def prefill_tables(p: AttentionParams) -> tuple[np.ndarray, np.ndarray]:
    """RoPE tables [S, head_dim] for a prefill's positions position_offset..+seq_len."""
    positions = np.arange(p.position_offset, p.position_offset + p.seq_len)
    return tables(positions, p.dim, p.rope_theta, p.rope_scaling)


def input_tables(inputs: Arrays) -> tuple[np.ndarray, np.ndarray]:
    """A decode's RoPE tables, as given in its cos, sin inputs [1, 1, head_dim, T]."""
    return f64(inputs["cos"])[0, 0].T, f64(inputs["sin"])[0, 0].T


def visible_past(cache: np.ndarray, length) -> np.ndarray:
    """The cache rows a decode reads: the first `length` of [1, kv_heads, cache_len, head_dim]
    (none for a length <= 0, all of them beyond cache_len)."""
    n = int(np.clip(int(np.asarray(length).reshape(-1)[0]), 0, cache.shape[2]))
    return f64(cache)[0, :, :n]


def cache_layout(rows: np.ndarray) -> np.ndarray:
    """[kv_heads, S, head_dim] -> [1, kv_heads, S, head_dim]."""
    return rows[None]


def reference_context(
    p: AttentionParams,
    inputs: Arrays,
    caches: tuple[str, ...] = ("",),
    states: Arrays | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """(token rows of x, cos, sin, per layer the visible past or None) of a call; the cache
    comes from the inputs, or from the states before the call (`kv_cache: state`)."""
    x = tokens(inputs["x"])
    if p.mode == "prefill":
        cos, sin = prefill_tables(p)
        return x, cos, sin, [None] * len(caches)
    cos, sin = input_tables(inputs)
    held = (states or {}) if p.stateful else inputs
    pasts = [
        (
            visible_past(held[f"k_cache{c}"], inputs["length"]),
            visible_past(held[f"v_cache{c}"], inputs["length"]),
        )
        for c in caches
    ]
    return x, cos, sin, pasts


def states_after(
    p: AttentionParams, states: Arrays, length, new: dict[str, tuple[np.ndarray, np.ndarray]]
) -> dict[str, np.ndarray]:
    """The cache states after a stateful decode: each layer's new k, v rows [kv_heads, T,
    head_dim] written at rows length.. (nothing for a call that keeps its cache as inputs)."""
    if not p.stateful:
        return {}
    start = int(np.asarray(length).reshape(-1)[0])
    out = {}
    for c, (k, v) in new.items():
        for name, rows in ((f"k_cache{c}", k), (f"v_cache{c}", v)):
            cache = f64(states[name]).copy()
            cache[0, :, start : start + rows.shape[1]] = rows
            out[name] = cache
    return out
