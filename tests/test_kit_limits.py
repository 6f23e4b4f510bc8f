"""A model kit's own limits (app/kits/limits.py), derived from its checkpoint before any work:
the checkpoint's tensor bytes, the kit's predicted size (against the kit a build writes) and a
time limit that grows with the kit; over a cap, refused naming the setting."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from kit_support import KIT_LLAMA, KIT_QWEN3, model_tensors, write_model

from app.errors import ErrorKind, RequestError
from app.kits import model_zip
from app.kits.build import KitOptions
from app.kits.causal_lm import open_model
from app.kits.limits import GB, limits_of, longest_timeout_s
from app.settings import Settings

SETTINGS = Settings(kit_timeout_base_s=60, kit_timeout_s_per_gb=1e6)
# Llama-3.2-1B's config.json (the parts a kit reads)
LLAMA_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def sparse_checkpoint(folder: Path, config: dict) -> Path:
    """A save_pretrained folder whose model.safetensors has the model's real header (bf16) and
    holes for its data: gigabytes long, a few kilobytes on disk. Only headers are read here."""
    h, vocab, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    shapes = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h]}
    for i in range(layers):
        layer = {
            "self_attn.q_proj": [h, h],
            "self_attn.k_proj": [kv, h],
            "self_attn.v_proj": [kv, h],
            "self_attn.o_proj": [h, h],
            "mlp.gate_proj": [config["intermediate_size"], h],
            "mlp.up_proj": [config["intermediate_size"], h],
            "mlp.down_proj": [h, config["intermediate_size"]],
            "input_layernorm": [h],
            "post_attention_layernorm": [h],
        }
        shapes |= {f"model.layers.{i}.{name}.weight": shape for name, shape in layer.items()}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)
    return folder


def test_the_limits_follow_the_checkpoint(tmp_path):
    small = write_model(tmp_path / "small", KIT_QWEN3, seed=1)
    deeper = KIT_QWEN3 | {"num_hidden_layers": 6}
    big = write_model(tmp_path / "big", deeper, seed=1)
    options = KitOptions(format="mil", context=16, prefill=4)
    a = limits_of(open_model(small), options, SETTINGS)
    b = limits_of(open_model(big), options, SETTINGS)
    # the checkpoint's float32 tensors, byte for byte
    assert a.checkpoint_bytes == sum(t.nbytes for t in model_tensors(KIT_QWEN3, 1).values())
    assert b.checkpoint_bytes == sum(t.nbytes for t in model_tensors(deeper, 1).values())
    assert b.kit_bytes_estimate > a.kit_bytes_estimate
    assert b.timeout_s > a.timeout_s
    assert a.timeout_s == pytest.approx(60 + 1e6 * a.kit_bytes_estimate / GB)
    verified = limits_of(
        open_model(small), KitOptions(format="mil", context=16, prefill=4, verify=True), SETTINGS
    )
    assert verified.timeout_s == pytest.approx(60 + 2e6 * a.kit_bytes_estimate / GB)
    four_bit = {"layers": {"mode": "palettize", "nbits": 4}}
    quantized = limits_of(open_model(big), KitOptions(quantize=four_bit), SETTINGS)
    assert quantized.kit_bytes_estimate < b.kit_bytes_estimate


def test_the_estimate_is_the_size_of_the_kit_built(tmp_path):
    """Llama's weights dominate its kit (tied head, 16,500 rows): the estimate is within 2%."""
    folder = write_model(tmp_path / "llama", KIT_LLAMA, seed=3)
    for kit_format in ("mil", "mlpackage"):
        options = {"format": kit_format, "context": 16, "prefill": 4}
        estimate = limits_of(open_model(folder), KitOptions(**options), SETTINGS)
        built = len(model_zip(folder, **options))
        assert abs(built - estimate.kit_bytes_estimate) < 0.02 * built, kit_format


def test_over_a_cap_the_kit_is_refused_naming_the_setting(tmp_path):
    model = open_model(write_model(tmp_path / "qwen3", KIT_QWEN3, seed=1))
    limits = limits_of(model, KitOptions(), SETTINGS)
    with pytest.raises(RequestError) as checkpoint:
        limits_of(model, KitOptions(), Settings(max_checkpoint_bytes=limits.checkpoint_bytes - 1))
    assert checkpoint.value.field == "files" and checkpoint.value.kind == ErrorKind.TOO_LARGE
    assert f"ANE_MAX_CHECKPOINT_BYTES={limits.checkpoint_bytes - 1}" in checkpoint.value.message
    assert str(limits.checkpoint_bytes) in checkpoint.value.message
    tight = Settings(kit_cache_max_bytes=limits.kit_bytes_estimate - 1)
    with pytest.raises(RequestError) as cache:
        limits_of(model, KitOptions(), tight)
    assert cache.value.field == "files" and cache.value.kind == ErrorKind.TOO_LARGE
    assert "ANE_KIT_CACHE_MAX_BYTES" in cache.value.message
    assert str(limits.kit_bytes_estimate) in cache.value.message


def test_a_farm_workers_backstop_is_past_every_limit_its_settings_give():
    settings = Settings()
    # a kit is at most twice its checkpoint's bytes; verified, its per-GB share doubles
    largest = settings.kit_timeout_base_s + 4 * settings.kit_timeout_s_per_gb * (
        settings.max_checkpoint_bytes / GB
    )
    assert longest_timeout_s(settings) == pytest.approx(largest)
    assert longest_timeout_s(settings) > settings.job_timeout_s


def test_a_1b_kit_fits_the_default_limits(tmp_path):
    """The issue's case: Llama-3.2-1B in bf16, 2.47 GB of tensors, a kit of 3.0 GB (16 layers,
    the head pieces and the embedding table in fp16, as the kit's layout holds them): over the kernels' 2 GiB cache budget, within
    every default limit of a kit; its time limit 900 s + 120 s per GB."""
    settings = Settings()
    limits = limits_of(
        open_model(sparse_checkpoint(tmp_path / "llama", LLAMA_1B)), KitOptions(), settings
    )
    assert limits.checkpoint_bytes == 2_471_628_800
    layers = 16 * (2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048 + 2 * 2048)
    # two decoder programs, each with its tables (rope signs, cache positions, the prefill's
    # causal mask at the default context 512 and chunks of 64); eight head pieces, each with the
    # final norm
    tables = 2 * (2 * 64 + 4 * 512 + 2 * 64 * 64)
    head = 2 * 128256 * 2048 + 8 * 2 * 2048
    assert limits.kit_bytes_estimate == 2 * layers + tables + head + 2 * 128256 * 2048
    assert settings.cache_max_bytes < limits.kit_bytes_estimate < settings.kit_cache_max_bytes
    assert limits.timeout_s == pytest.approx(900 + 120 * limits.kit_bytes_estimate / GB)
    # docs/kits.md's example is this derivation
    doc = (Path(__file__).resolve().parents[1] / "docs" / "kits.md").read_text()
    shown = json.loads(re.search(r'^"limits": (\{.*\})$', doc, re.M).group(1))
    assert shown == pytest.approx(limits.model_dump(), abs=0.05)
