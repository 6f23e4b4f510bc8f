"""The programs of the transformer-block ops, piece by piece, through the builder.

Layout: the residual stream is [1, hidden, 1, S] (the ANE layout); projections are 1×1 convs on
it; a projection's channels split into heads as [1, heads, head_dim, S], where RoPE rotates along
axis 2. Keys and values leave as [1, kv_heads, S, head_dim] (the layout Hugging Face caches hold)
and the scores are computed keys-major, [1, heads, keys, S]: no transpose of Q or of the context
is needed (context = Vᵀ·P comes out as [1, heads, head_dim, S], which is the o projection's input
after one reshape).

- RoPE: `rotate_half(x)·sin` is `swap_halves(x)·sin±` with sin± = sin with its first half
  negated, so a rotation is one split, one concat of two, two products and a sum. Prefill bakes
  cos and sin± as fp16 consts [1, 1, head_dim, S]; decode takes `cos`/`sin` inputs and negates
  sin's first half once per program.
- GQA: key/value head g serves query heads g·r .. g·r + r − 1 (`repeat_kv`): each head is
  repeated r times in place by concat(interleave=true), in pairs while r is even (the ANE
  preflight warns on concats of more than two values).
- Masks: the ANE ignores SDPA's attn_mask, so attention is spelled out (matmul, add a mask,
  softmax over the keys axis, matmul). Masked scores get −30000, not fp16's −65504: a score
  below −35 would take −65504 past the fp16 range (−inf) and report a false overflow, while
  exp(−30000) is 0 all the same.
- Decode: the cache rows at positions ≥ `length` (an int32 input) are masked from the length at
  run time: clamp(length − position, 0, 1) − 1, times 30000, in int32 then fp16.
- Decode with the cache in ios18 states (`kv_cache: state`): the new rows are written into the
  states at `length` (slice_update between read_state and write_state) and attention reads the
  whole cache back, row j visible to new token t when j <= length + t.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.kernels.common import FP16, conv1x1
from app.kernels.op import const_name
from app.kernels.rmsnorm import normalize
from app.kernels.rope import rope_inputs
from app.kernels.transformer_params import AttentionParams, MLPParams
from app.kernels.transformer_reference import prefill_tables
from app.mil import Builder, DType, Var

MASKED = -30000.0
Name = Callable[[str], str]


def prefixed(prefix: str) -> Name:
    return lambda base: f"{prefix}{base}"


@dataclass(frozen=True)
class Rope:
    """The tables a program rotates with, [1, 1, head_dim, S]: cos, and sin with its first
    half negated."""

    cos: Var
    sin_signed: Var


@dataclass(frozen=True)
class Past:
    """The cache a decode attends over besides its new tokens: inputs, or ios18 states that
    the new rows are written into at [begin, end) before attention reads them back."""

    k: Var  # [1, kv_heads, cache_len, head_dim], a tensor or a state
    v: Var
    begin: Var | None = None  # states only: int32 [4], [0, 0, length, 0]
    end: Var | None = None  # begin + [1, kv_heads, T, head_dim]


def _signed(sin: np.ndarray) -> np.ndarray:
    half = sin.shape[0] // 2
    return np.concatenate([-sin[:half], sin[half:]])


def baked_rope(b: Builder, p: AttentionParams) -> Rope:
    """A prefill's tables as consts (fp16), for positions position_offset .. + seq_len."""
    cos, sin = prefill_tables(p)
    return Rope(
        b.const("rope_cos", cos.T[None, None].astype(np.float16), FP16),
        b.const("rope_sin_signed", _signed(sin.T)[None, None].astype(np.float16), FP16),
    )


def input_rope(b: Builder, p: AttentionParams) -> Rope:
    """A decode's tables from its `cos` and `sin` inputs [1, 1, head_dim, T]."""
    shape = (1, 1, p.dim, p.seq_len)
    cos, sin = b.input("cos", FP16, shape), b.input("sin", FP16, shape)
    sign = _signed(np.ones(p.dim))[None, None, :, None].astype(np.float16)
    return Rope(cos, b.op("mul", "rope_sin_signed", x=sin, y=b.const("rope_sign", sign, FP16)))


def decode_tables(
    head_dim: int, cache_len: int, seq_len: int, state: bool
) -> dict[str, tuple[int, DType]]:
    """The constant tables a decode-mode program over a cache of `cache_len` holds besides its
    weights, for a call of `seq_len` tokens: name -> (elements, dtype). The rope signs
    (`input_rope`), the cache rows' positions, and the new tokens' causal mask (`decode_mask`)
    or their steps (`state_mask`). The planner counts them (app/planner/layout.py)."""
    tables = {"rope_sign": (head_dim, FP16), "cache_positions": (cache_len, DType.INT32)}
    if state:
        return tables | {"token_steps": (seq_len, DType.INT32)}
    return tables | {"new_mask": (seq_len * seq_len, FP16)}


def causal_mask(seq_len: int) -> np.ndarray:
    """[1, 1, keys, queries]: key j is visible to query i when j <= i."""
    j, i = np.arange(seq_len)[:, None], np.arange(seq_len)[None, :]
    return np.where(j <= i, 0.0, MASKED).astype(np.float16)[None, None]


def decode_mask(b: Builder, p: AttentionParams, length: Var) -> Var:
    """[1, 1, cache_len + T, T]: cache row c is visible when c < length; new token j to query i
    when j <= i."""
    cache_len, t = p.cache_len or 0, p.seq_len
    positions = b.const(
        "cache_positions", np.arange(cache_len, dtype=np.int32).reshape(1, 1, -1, 1)
    )
    ahead = b.op("sub", "cache_ahead", x=length, y=positions)  # length − c, int32
    cache_mask = _masked_unless_ahead(b, ahead, "cache_mask")
    if t > 1:
        cache_mask = b.op("tile", "cache_mask_rows", x=cache_mask, reps=[1, 1, 1, t])
    new_mask = b.const("new_mask", causal_mask(t), FP16)
    return b.op("concat", "attn_mask", values=(cache_mask, new_mask), axis=2)


def _linear(b: Builder, n: Name, label: str, x: Var, w, key: str, bias: bool) -> Var:
    weight = b.const(const_name(f"{key}.weight"), w[f"{key}.weight"], FP16)
    b_var = b.const(const_name(f"{key}.bias"), w[f"{key}.bias"], FP16) if bias else None
    return conv1x1(b, n(label), x, weight, b_var)


def _norm(b: Builder, n: Name, label: str, x: Var, channels: int, eps: float, gain) -> Var:
    normed = normalize(b, x, channels, eps, name=lambda s: n(f"{label}_{s}"))
    return b.op("mul", n(label), x=normed, y=gain)


def _head_norm(b: Builder, n: Name, label: str, x: Var, w, key: str, p: AttentionParams) -> Var:
    """RMSNorm over head_dim of heads [1, heads, head_dim, S], the gain [1, 1, head_dim, 1]."""
    gain = b.const(const_name(key), w[key], FP16)
    normed = normalize(b, x, p.dim, p.rms_norm_eps, name=lambda s: n(f"{label}_{s}"), axis=2)
    return b.op("mul", n(label), x=normed, y=gain)


def _rotate(b: Builder, n: Name, label: str, x: Var, rope: Rope) -> Var:
    first, second = b.op_outputs("split", n(f"{label}_halves"), x=x, num_splits=2, axis=2)
    swapped = b.op("concat", n(f"{label}_swapped"), values=(second, first), axis=2)
    return b.op(
        "add",
        n(f"{label}_rot"),
        x=b.op("mul", n(f"{label}_cos"), x=x, y=rope.cos),
        y=b.op("mul", n(f"{label}_sin"), x=swapped, y=rope.sin_signed),
    )


def _repeat_heads(b: Builder, n: Name, label: str, x: Var, group: int) -> Var:
    """[1, kv_heads, L, D] -> [1, kv_heads·group, L, D], head g repeated group times in place."""
    step = 0
    while group > 1:
        times = 2 if group % 2 == 0 else group
        x = b.op("concat", n(f"{label}_rep{step}"), values=(x,) * times, axis=1, interleave=True)
        group //= times
        step += 1
    return x


def attention(
    b: Builder,
    p: AttentionParams,
    x: Var,
    w,
    prefix: str,
    n: Name,
    rope: Rope,
    mask: Var | None,
    past: Past | None,
    out: tuple[str, str, str],
) -> tuple[Var, Var, Var]:
    """The attention block on the residual stream x [1, hidden, 1, S]: (x + attention, new k,
    new v), named `out`. `mask` [1, 1, keys, S] (None: every key is visible) covers the `past`
    rows, then the new ones."""
    s, h, kvh, d = p.seq_len, p.heads, p.kv_heads, p.dim
    gain = b.const(
        const_name(f"{prefix}input_layernorm.weight"), w[f"{prefix}input_layernorm.weight"], FP16
    )
    normed = _norm(b, n, "input_norm", x, p.hidden_size, p.rms_norm_eps, gain)
    a, bias = f"{prefix}self_attn.", p.attention_bias
    q = _linear(b, n, "q_proj", normed, w, f"{a}q_proj", bias)
    k = _linear(b, n, "k_proj", normed, w, f"{a}k_proj", bias)
    v = _linear(b, n, "v_proj", normed, w, f"{a}v_proj", bias)
    q = b.op("reshape", n("q_heads"), x=q, shape=[1, h, d, s])
    k = b.op("reshape", n("k_heads"), x=k, shape=[1, kvh, d, s])
    if p.qk_norm:  # Qwen3: each head normed over head_dim (axis 2) before its rotation
        q = _head_norm(b, n, "q_norm", q, w, f"{a}q_norm.weight", p)
        k = _head_norm(b, n, "k_norm", k, w, f"{a}k_norm.weight", p)
    q, k = _rotate(b, n, "q", q, rope), _rotate(b, n, "k", k, rope)
    v = b.op("reshape", n("v_heads"), x=v, shape=[1, kvh, d, s])
    k_new = b.op("transpose", out[1], x=k, perm=[0, 1, 3, 2])  # [1, kv_heads, S, head_dim]
    v_new = b.op("transpose", out[2], x=v, perm=[0, 1, 3, 2])
    keys, values = k_new, v_new
    if past is not None and past.begin is not None:
        keys = _write_rows(b, n, "k_cache", past.k, k_new, past)
        values = _write_rows(b, n, "v_cache", past.v, v_new, past)
    elif past is not None:
        keys = b.op("concat", n("keys"), values=(past.k, k_new), axis=2)
        values = b.op("concat", n("values"), values=(past.v, v_new), axis=2)
    keys = _repeat_heads(b, n, "keys", keys, h // kvh)
    values = _repeat_heads(b, n, "values", values, h // kvh)
    q = b.op("mul", n("q_scaled"), x=q, y=1 / math.sqrt(d))
    scores = b.op("matmul", n("scores"), x=keys, y=q)  # [1, heads, keys, S]
    if mask is not None:
        scores = b.op("add", n("masked_scores"), x=scores, y=mask)
    probs = b.op("softmax", n("probs"), x=scores, axis=2)
    context = b.op("matmul", n("context"), x=values, y=probs, transpose_x=True)  # [1, h, d, S]
    context = b.op("reshape", n("context_channels"), x=context, shape=[1, h * d, 1, s])
    attn = _linear(b, n, "o_proj", context, w, f"{a}o_proj", p.has_o_bias)
    return b.op("add", out[0], x=x, y=attn), k_new, v_new


def _write_rows(b: Builder, n: Name, label: str, state: Var, rows: Var, past: Past) -> Var:
    """The state with `rows` written at [begin, end), then read back (the form coremltools
    lowers coreml_update_state to: write_state, read_state)."""
    old = b.op("read_state", n(f"{label}_old"), input=state)
    updated = b.op(
        "slice_update", n(f"{label}_updated"), x=old, update=rows, begin=past.begin, end=past.end
    )
    b.op_outputs("write_state", n(f"{label}_write_state"), input=state, data=updated)
    return b.op("read_state", n(f"{label}_read"), input=state)


def state_mask(b: Builder, p: AttentionParams, length: Var) -> Var:
    """[1, 1, cache_len, T] over a cache the new rows were written into at `length`: row j is
    visible to new token t when j <= length + t."""
    cache_len, t = p.cache_len or 0, p.seq_len
    rows = b.const("cache_positions", np.arange(cache_len, dtype=np.int32).reshape(1, 1, -1, 1))
    steps = b.const("token_steps", np.arange(1, t + 1, dtype=np.int32).reshape(1, 1, 1, -1))
    ahead = b.op("sub", "cache_ahead", x=b.op("add", "query_ends", x=length, y=steps), y=rows)
    return _masked_unless_ahead(b, ahead, "attn_mask")


def _masked_unless_ahead(b: Builder, ahead: Var, name: str) -> Var:
    """0 where the int32 `ahead` is positive, MASKED elsewhere: clamped to {0, 1} in int32 (exact
    for any cache length), then scaled once in fp16."""
    valid = b.op("minimum", "cache_valid", x=b.op("maximum", "cache_ahead_pos", x=ahead, y=0), y=1)
    hidden = b.op(
        "sub", "cache_hidden", x=b.op("cast", "cache_valid_fp16", x=valid, dtype="fp16"), y=1.0
    )
    return b.op("mul", name, x=hidden, y=-MASKED)


def mlp(
    b: Builder,
    p: MLPParams,
    x: Var,
    w,
    prefix: str,
    n: Name,
    out: str,
    norm: bool = True,
    residual: bool = True,
) -> Var:
    """down(act(gate(h)) · up(h)), h the post-attention RMSNorm of x (or x), plus x."""
    h = x
    if norm:
        key = f"{prefix}post_attention_layernorm.weight"
        gain = b.const(const_name(key), w[key], FP16)
        h = _norm(b, n, "post_norm", x, p.hidden_size, p.rms_norm_eps, gain)
    m = f"{prefix}mlp."
    gate = _linear(b, n, "gate_proj", h, w, f"{m}gate_proj", False)
    up = _linear(b, n, "up_proj", h, w, f"{m}up_proj", False)
    if p.hidden_act == "silu":
        act = b.op("silu", n("act"), x=gate)
    elif p.hidden_act == "gelu_tanh":
        act = b.op("gelu", n("act"), x=gate, mode="TANH_APPROXIMATION")
    else:
        act = b.op("square", n("act"), x=b.op("relu", n("relu"), x=gate))
    gated = b.op("mul", n("gated"), x=act, y=up)
    key = f"{m}down_proj.weight"
    down_weight = b.const(const_name(key), w[key], FP16)
    if not residual:
        return conv1x1(b, out, gated, down_weight)
    down = conv1x1(b, n("down_proj"), gated, down_weight)
    return b.op("add", out, x=x, y=down)


def prefill_mask(b: Builder, p: AttentionParams) -> Var | None:
    """The causal mask of a prefill (None for one token: it sees itself only)."""
    return b.const("causal_mask", causal_mask(p.seq_len), FP16) if p.seq_len > 1 else None


@dataclass(frozen=True)
class Context:
    """What every layer of a program reads besides its weights."""

    x: Var  # the residual stream [1, hidden, 1, S]
    rope: Rope
    mask: Var | None
    pasts: tuple[Past | None, ...]  # per layer (None for a prefill)


def context(b: Builder, p: AttentionParams, caches: tuple[str, ...] = ("",)) -> Context:
    """The program's inputs and shared tables: x; for decode, per layer `k_cache<suffix>` and
    `v_cache<suffix>` [1, kv_heads, cache_len, head_dim], then `length` (int32 [1]), `cos` and
    `sin` [1, 1, head_dim, T]."""
    x = b.input("x", FP16, (1, p.hidden_size, 1, p.seq_len))
    if p.mode == "prefill":
        return Context(x, baked_rope(b, p), prefill_mask(b, p), (None,) * len(caches))
    shape = (1, p.kv_heads, p.cache_len or 0, p.dim)
    if p.stateful:
        states = [
            (b.state(f"k_cache{c}", FP16, shape), b.state(f"v_cache{c}", FP16, shape))
            for c in caches
        ]
        length = b.input("length", DType.INT32, (1,))
        rope = input_rope(b, p)
        row = b.const("cache_row", np.array([0, 0, 1, 0], np.int32))
        begin = b.op("mul", "cache_begin", x=length, y=row)  # [0, 0, length, 0]
        end = b.op(
            "add",
            "cache_end",
            x=begin,
            y=b.const("cache_extent", np.array([1, p.kv_heads, p.seq_len, p.dim], np.int32)),
        )
        pasts = tuple(Past(k, v, begin, end) for k, v in states)
        return Context(x, rope, state_mask(b, p, length), pasts)
    pasts = tuple(
        Past(b.input(f"k_cache{c}", FP16, shape), b.input(f"v_cache{c}", FP16, shape))
        for c in caches
    )
    length = b.input("length", DType.INT32, (1,))
    rope = input_rope(b, p)
    return Context(x, rope, decode_mask(b, p, length), pasts)


def decode_inputs(p: AttentionParams, drawn: dict[str, np.ndarray], seed: int) -> dict[str, str]:
    """A decode's verification inputs: a valid cache length and the RoPE tables of the positions
    that follow it (standard-normal `cos`/`sin` rotate nothing)."""
    if p.mode != "decode":
        return {}
    rng = np.random.default_rng(seed + 1)
    top = (p.cache_len or 0) - (p.seq_len if p.stateful else 0)
    length = int(rng.integers(0, top + 1))
    drawn["length"] = np.array([length], np.int32)
    drawn.update(
        rope_inputs(np.arange(length, length + p.seq_len), p.dim, p.rope_theta, p.rope_scaling)
    )
    return {
        "length": f"uniform in [0, {top}]",
        "cos": "RoPE cos of positions length…",
        "sin": "RoPE sin of positions length…",
    }
