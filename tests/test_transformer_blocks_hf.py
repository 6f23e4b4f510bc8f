"""The transformer-block ops against transformers itself (needs the `reference` extra: torch and
transformers; skipped without, saying why): the float64 definitions and the fp16 programs agree
with transformers' own LlamaDecoderLayer, Qwen2DecoderLayer, Qwen3DecoderLayer (per-head q/k
norms), rotary embedding and activations. Its own module, so that the skip leaves the blocks'
other tests (tests/test_transformer_blocks.py) running."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from checkpoint_support import LLAMA, op_params

from app.catalog_build import build_kernel
from app.kernels import CATALOG
from app.kernels.rope import Llama3RopeScaling, tables
from app.reference import Executor
from app.reference.verify import max_errors

torch = pytest.importorskip(
    "torch", reason="the transformers comparison needs torch (extra: reference)"
)
transformers = pytest.importorskip("transformers", reason="needs transformers (extra: reference)")


def _hf_layer(kind: str, config: dict, seed: int):
    """A transformers decoder layer in float64 with seeded random weights."""
    if kind == "qwen2":
        from transformers import Qwen2Config as Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer as Layer
    elif kind == "qwen3":
        from transformers import Qwen3Config as Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer as Layer
    else:
        from transformers import LlamaConfig as Config
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer as Layer
    hf_config = Config(**copy.deepcopy(config), max_position_embeddings=4096)
    hf_config._attn_implementation = "eager"
    layer = Layer(hf_config, layer_idx=0).double().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in layer.named_parameters():
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float64)
            values = 1 + 0.1 * noise if "norm" in name else noise * t.shape[-1] ** -0.5
            t.copy_(values.float().double())  # float32 values: the weights given to the op
    weights = {n: t.detach().numpy().astype(np.float32) for n, t in layer.named_parameters()}
    return layer, weights


def _hf_forward(layer, x_rows: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    s = x_rows.shape[0]
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    emb = (torch.from_numpy(cos)[None], torch.from_numpy(sin)[None])
    with torch.no_grad():
        out = layer(
            torch.from_numpy(x_rows)[None],
            attention_mask=mask,
            position_ids=torch.arange(s)[None],
            position_embeddings=emb,
        )
    out = out[0] if isinstance(out, tuple) else out
    return out[0].numpy()


HF_CASES = {
    "llama-gqa-llama3": ("llama", {k: v for k, v in LLAMA.items() if k != "model_type"}),
    "llama-mha-bias": (
        "llama",
        {
            "hidden_size": 24,
            "intermediate_size": 40,
            "num_attention_heads": 3,
            "num_key_value_heads": 3,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "attention_bias": True,
            "hidden_act": "silu",
        },
    ),
    "qwen2": (
        "qwen2",
        {
            "hidden_size": 32,
            "intermediate_size": 40,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1e6,
            "hidden_act": "silu",
        },
    ),
    "qwen3-qk-norm": (
        "qwen3",
        {
            "hidden_size": 32,
            "intermediate_size": 40,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1e6,
            "hidden_act": "silu",
        },
    ),
}


@pytest.mark.parametrize("case", list(HF_CASES))
def test_decoder_layer_matches_transformers(case):
    """Same weights, same RoPE tables: the float64 definition equals transformers' layer to
    float32 rounding, and the fp16 program is within the op's tolerance of it."""
    kind, config = HF_CASES[case]
    layer, weights = _hf_layer(kind, config, seed=1)
    s, offset = 10, 37
    params = op_params(config, seq_len=s, position_offset=offset)
    if kind == "qwen2":
        params |= {"attention_bias": True, "o_proj_bias": False}
    if kind == "qwen3":
        params |= {"qk_norm": True}
    build = build_kernel("decoder_layer", params, weights)
    cos, sin = tables(
        np.arange(offset, offset + s),
        build.params.dim,
        build.params.rope_theta,
        build.params.rope_scaling,
    )
    x = np.random.default_rng(4).standard_normal((s, config["hidden_size"]))
    expected = _hf_forward(layer, x, cos, sin)
    x_ane = x.T[None, :, None, :]
    exact, _ = build.exact({"x": x_ane}, {})
    # transformers computes RMSNorm and the softmax in float32 even in a float64 layer: the
    # definition agrees to float32 rounding (a wrong formula is off by ~1)
    assert max_errors(exact["y"][0, :, 0, :].T, expected)[1] < 1e-6
    got = Executor.from_written_weights(build.program).run({"x": x_ane.astype(np.float16)})
    assert (
        max_errors(got.outputs["y"][0, :, 0, :].T, expected)[1]
        <= CATALOG["decoder_layer"].tolerance
    )


@pytest.mark.parametrize("scaling", [None, LLAMA["rope_scaling"]], ids=["default", "llama3"])
def test_rope_tables_match_transformers(scaling):
    """transformers computes the frequencies in float32: agreement to float32 precision."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = {"hidden_size": 64, "num_attention_heads": 2, "rope_theta": 500000.0}
    if scaling is not None:
        config["rope_scaling"] = copy.deepcopy(scaling)
    rotary = LlamaRotaryEmbedding(LlamaConfig(**config, max_position_embeddings=8192))
    positions = np.array([0, 1, 7, 100, 2000, 8000])
    cos_hf, sin_hf = rotary(
        torch.zeros(1, 1, dtype=torch.float32), torch.from_numpy(positions)[None]
    )
    parsed = None if scaling is None else Llama3RopeScaling(**scaling)
    cos, sin = tables(positions, 32, 500000.0, parsed)
    # float32 frequencies times positions up to 8000: angle errors up to ~8000 · 2⁻²⁴ · ...
    assert np.abs(cos - cos_hf[0].double().numpy()).max() < 2e-3
    assert np.abs(sin - sin_hf[0].double().numpy()).max() < 2e-3
    near = positions < 200
    assert np.abs(cos[near] - cos_hf[0].double().numpy()[near]).max() < 1e-5


@pytest.mark.parametrize(
    ("ours", "theirs"), [("silu", "silu"), ("gelu_tanh", "gelu_pytorch_tanh"), ("relu2", "relu2")]
)
def test_activations_match_transformers(ours, theirs):
    from transformers.activations import ACT2FN

    from app.kernels.transformer_reference import ACTIVATIONS

    g = np.linspace(-8, 8, 1001)
    expected = ACT2FN[theirs](torch.from_numpy(g)).numpy()
    assert np.abs(ACTIVATIONS[ours](g) - expected).max() < 1e-12
