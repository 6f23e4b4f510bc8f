"""The transformer-block ops (ffn, attention, decoder_layer) built from a small random checkpoint
written here with Hugging Face's tensor names: each verifies; residual streams up to |x| = 1000
and RMSNorm inputs up to 60000 stay within the tolerance; prefill then decode over the returned
K/V gives the last tokens of one longer prefill. The comparison with transformers' own layers is
tests/test_transformer_blocks_hf.py (it needs torch)."""

from __future__ import annotations

import numpy as np
import pytest
from checkpoint_support import LLAMA, layer_weights, op_params, write_checkpoint
from safetensors.numpy import load_file

from app.catalog_build import build_kernel
from app.errors import RequestError
from app.kernels import CATALOG
from app.kernels.rope import Llama3RopeScaling, rope_inputs
from app.reference import Executor
from app.reference.verify import max_errors, verify_build


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path, _, _ = write_checkpoint(tmp_path_factory.mktemp("ckpt"), LLAMA, seed=3)
    return load_file(str(path))


def _layer(checkpoint, layer=1, *, ffn=False, attn=False):
    w = layer_weights(checkpoint, layer)
    if ffn:
        return {k: v for k, v in w.items() if k.startswith(("mlp.", "post_attention"))}
    if attn:
        return {k: v for k, v in w.items() if k.startswith(("self_attn.", "input_layernorm"))}
    return w


def _params(op, config=LLAMA, **call):
    """The config keys and call params op `op` takes."""
    fields = CATALOG[op].params.model_fields
    return {k: v for k, v in op_params(config, **call).items() if k in fields}


def _run(build, inputs):
    result = Executor.from_written_weights(build.program).run(inputs)
    exact, _ = build.exact(inputs, {})
    return result, exact


def _x(rng, hidden, seq, amp=1.0, peak=None):
    x = amp * rng.standard_normal((1, hidden, 1, seq))
    if peak is not None:  # every token's largest |x| at `peak`
        x *= peak / np.abs(x).max(axis=1, keepdims=True)
    return x.astype(np.float16)


CASES = [
    ("ffn", {"seq_len": 8}),
    ("attention", {"seq_len": 8, "position_offset": 3}),
    ("attention", {"seq_len": 2, "mode": "decode", "cache_len": 16}),
    ("decoder_layer", {"seq_len": 8}),
    ("decoder_layer", {"seq_len": 3, "mode": "decode", "cache_len": 10}),
]


@pytest.mark.parametrize(("op", "call"), CASES, ids=[f"{o}-{i}" for i, (o, _) in enumerate(CASES)])
def test_each_block_from_a_checkpoint_verifies(checkpoint, op, call):
    params = _params(op, **call)
    weights = _layer(checkpoint, ffn=op == "ffn", attn=op == "attention")
    report = verify_build(build_kernel(op, params, weights), seed=5)
    assert report["passed"], report["outputs"]
    assert set(report["outputs"]) == set(CATALOG[op].outputs)
    assert not report["fp16_overflow"] and not report["nan"]


@pytest.mark.parametrize("op", ["ffn", "attention", "decoder_layer"])
@pytest.mark.parametrize(("amp", "peak"), [(1000.0, None), (1.0, 60000.0)], ids=["1e3", "6e4"])
def test_large_residual_streams_and_norm_inputs(checkpoint, op, amp, peak):
    """|x| about 1000 on the residual stream, and every token's largest |x| at 60000 (x² would
    overflow fp16 at 256): within the tolerance, no overflow anywhere in the program."""
    rng = np.random.default_rng(11)
    params = _params(op, seq_len=6)
    build = build_kernel(op, params, _layer(checkpoint, ffn=op == "ffn", attn=op == "attention"))
    result, exact = _run(build, {"x": _x(rng, LLAMA["hidden_size"], 6, amp, peak)})
    assert not result.anomalies
    for name, values in exact.items():
        assert max_errors(result.outputs[name], values)[1] <= CATALOG[op].tolerance, name


def _rows(cache: np.ndarray, filler: np.ndarray, length: int) -> np.ndarray:
    """A cache of `filler`'s shape holding `cache` in its first rows (the rest is left-over
    garbage the mask must hide)."""
    out = filler.copy()
    out[:, :, :length] = cache
    return out


@pytest.mark.parametrize("op", ["attention", "decoder_layer"])
@pytest.mark.parametrize("new", [1, 3])
def test_prefill_then_decode_equals_one_longer_prefill(checkpoint, op, new):
    """Prefill S tokens, put the returned K/V in a cache, decode T more: the outputs are those of
    the last T tokens of one prefill of S + T (the definition's and the program's alike)."""
    rng = np.random.default_rng(7)
    s, cache_len, d = 9, 16, LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    weights = _layer(checkpoint, attn=op == "attention")
    x = _x(rng, LLAMA["hidden_size"], s + new)
    long = build_kernel(op, _params(op, seq_len=s + new), weights)
    long_out = Executor.from_written_weights(long.program).run({"x": x}).outputs
    short = build_kernel(op, _params(op, seq_len=s), weights)
    pre = Executor.from_written_weights(short.program).run({"x": x[..., :s]}).outputs
    step = build_kernel(op, _params(op, seq_len=new, mode="decode", cache_len=cache_len), weights)
    garbage = rng.standard_normal((1, LLAMA["num_key_value_heads"], cache_len, d))
    inputs = {
        "x": x[..., s:],
        "k_cache": _rows(pre["k"], garbage.astype(np.float16), s),
        "v_cache": _rows(pre["v"], garbage.astype(np.float16), s),
        "length": np.array([s], np.int32),
        **rope_inputs(
            np.arange(s, s + new),
            d,
            LLAMA["rope_theta"],
            Llama3RopeScaling(**LLAMA["rope_scaling"]),
        ),
    }
    result, exact = _run(step, inputs)
    long_exact, _ = long.exact({"x": x}, {})
    tol = CATALOG[op].tolerance
    for name, tail in (
        ("y", long_out["y"][..., s:]),
        ("k", long_out["k"][:, :, s:]),
        ("v", long_out["v"][:, :, s:]),
    ):
        assert max_errors(result.outputs[name], tail)[1] <= 2 * tol, name
    exact_tail = long_exact["y"][..., s:]
    assert max_errors(exact["y"], exact_tail)[1] <= 2 * tol  # fp16 K/V fed to the definition


@pytest.mark.parametrize("op", ["attention", "decoder_stack"])
def test_decode_with_the_cache_in_states(checkpoint, op):
    """ios18 states: the prefill's K/V put in the states, a decode of 2 tokens writes its rows
    at `length` and gives the last tokens of one longer prefill; the states then hold them."""
    rng = np.random.default_rng(9)
    s, new, cache_len, d = 7, 2, 12, LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    layer = {"first_layer": 1, "num_layers": 1} if op == "decoder_stack" else {}
    weights = _layer(checkpoint, attn=op == "attention")
    if op == "decoder_stack":
        weights = {f"layers.1.{k}": v for k, v in weights.items()}
    suffix = "_1" if op == "decoder_stack" else ""
    x = _x(rng, LLAMA["hidden_size"], s + new)
    long = build_kernel(op, _params(op, seq_len=s + new, **layer), weights)
    long_out = Executor.from_written_weights(long.program).run({"x": x}).outputs
    step = build_kernel(
        op,
        _params(op, seq_len=new, mode="decode", cache_len=cache_len, kv_cache="state", **layer),
        weights,
    )
    garbage = rng.standard_normal((1, LLAMA["num_key_value_heads"], cache_len, d)).astype(
        np.float16
    )
    states = {
        f"k_cache{suffix}": _rows(long_out[f"k{suffix}"][:, :, :s], garbage, s),
        f"v_cache{suffix}": _rows(long_out[f"v{suffix}"][:, :, :s], garbage, s),
    }
    before = {k: v.copy() for k, v in states.items()}
    executor = Executor.from_written_weights(step.program, states=states)
    inputs = {
        "x": x[..., s:],
        "length": np.array([s], np.int32),
        **rope_inputs(
            np.arange(s, s + new),
            d,
            LLAMA["rope_theta"],
            Llama3RopeScaling(**LLAMA["rope_scaling"]),
        ),
    }
    got = executor.run(inputs).outputs
    tol = CATALOG[op].tolerance
    assert max_errors(got["y"], long_out["y"][..., s:])[1] <= 2 * tol
    written = executor.states[f"k_cache{suffix}"]
    assert np.array_equal(written[:, :, s : s + new], got[f"k{suffix}"])
    assert np.array_equal(written[:, :, :s], before[f"k_cache{suffix}"][:, :, :s])
    assert np.array_equal(written[:, :, s + new :], garbage[:, :, s + new :])


def test_decode_masks_the_rows_beyond_length(checkpoint):
    """Changing cache rows at or after `length` changes nothing; changing one before it does."""
    rng = np.random.default_rng(2)
    params = _params("attention", seq_len=1, mode="decode", cache_len=8)
    build = build_kernel("attention", params, _layer(checkpoint, attn=True))
    d = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    cache = rng.standard_normal((1, LLAMA["num_key_value_heads"], 8, d)).astype(np.float16)
    inputs = {
        "x": _x(rng, LLAMA["hidden_size"], 1),
        "k_cache": cache,
        "v_cache": cache,
        "length": np.array([5], np.int32),
        **rope_inputs([5], d),
    }
    run = Executor.from_written_weights(build.program).run
    base = run(inputs).outputs["y"]
    later = cache.copy()
    later[:, :, 5:] = 9.0
    assert np.array_equal(run({**inputs, "k_cache": later, "v_cache": later}).outputs["y"], base)
    earlier = cache.copy()
    earlier[:, :, 4] = 9.0
    assert not np.array_equal(run({**inputs, "v_cache": earlier}).outputs["y"], base)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_attention_heads": 5}, "params.num_attention_heads"),
        ({"num_key_value_heads": 3}, "params.num_key_value_heads"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "params.rope_scaling"),
        ({"mode": "decode"}, "params"),
        ({"head_dim": 7}, "params"),
    ],
)
def test_bad_configs_name_the_key(change, field):
    params = op_params(LLAMA, seq_len=2) | change
    with pytest.raises(RequestError) as err:
        build_kernel("decoder_layer", params, random_seed=0)
    assert err.value.field.startswith(field)


def test_weights_carry_checkpoint_names_and_missing_ones_are_named(checkpoint):
    weights = _layer(checkpoint)
    del weights["self_attn.k_proj.weight"]
    with pytest.raises(RequestError) as err:
        build_kernel("decoder_layer", op_params(LLAMA, seq_len=2), weights)
    assert err.value.field == "weights.self_attn.k_proj.weight"
    wrong = _layer(checkpoint) | {"mlp.up_proj.weight": np.zeros((3, 3), np.float32)}
    with pytest.raises(RequestError) as err:
        build_kernel("decoder_layer", op_params(LLAMA, seq_len=2), wrong)
    assert err.value.field == "weights.mlp.up_proj.weight" and "[48, 32]" in err.value.message


def test_ffn_is_a_graph_node():
    """An ffn node reads hidden_size and seq_len off its input; the graph verifies."""
    from app.graphs.build import build_graph
    from app.graphs.spec import GraphParams

    graph = GraphParams.model_validate(
        {
            "inputs": {"x": {"shape": [1, 16, 1, 4]}},
            "nodes": [
                {
                    "id": "mlp",
                    "op": "ffn",
                    "params": {"intermediate_size": 24},
                    "inputs": {"x": "x"},
                },
                {"id": "out", "op": "relu", "inputs": {"x": "mlp"}},
            ],
            "outputs": {"y": "out"},
        }
    )
    build = build_graph(graph, random_seed=0)
    assert "mlp.mlp.gate_proj.weight" in build.weights
    report = verify_build(build, seed=1)
    assert report["passed"], report["outputs"]
