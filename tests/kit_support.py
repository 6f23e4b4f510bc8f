"""Small random causal-LM checkpoints in `save_pretrained` layout for the kit tests: config.json,
model.safetensors (with the embeddings, the final norm and, untied, lm_head.weight), and
tokenizer files. Llama (tied, a vocabulary above 16,384 so its head is split), Qwen2 (q/k/v
biases, untied) and Qwen3 (per-head q/k norms, explicit head_dim)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from checkpoint_support import LLAMA, random_tensors, write_safetensors

KIT_LLAMA = LLAMA | {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "vocab_size": 16500,
    "tie_word_embeddings": True,
    "max_position_embeddings": 128,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
KIT_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 32,
    "intermediate_size": 40,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "vocab_size": 300,
    "tie_word_embeddings": False,
    "max_position_embeddings": 64,
}
KIT_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "vocab_size": 260,
    "tie_word_embeddings": True,
    "max_position_embeddings": 64,
}
# a word-level tokenizer in the tokenizers library's format: "hello world" -> [5, 17]
TOKENIZER_JSON = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": None,
    "decoder": None,
    "model": {
        "type": "WordLevel",
        "vocab": {"<unk>": 0, "hello": 5, "world": 17},
        "unk_token": "<unk>",
    },
}


def model_tensors(config: dict, seed: int) -> dict[str, np.ndarray]:
    """Every tensor of the model, float32: the layers' (with Qwen3's q/k norms), embeddings
    (scaled so the first layer's norm sees |x| about 1), the final norm, lm_head when untied."""
    tensors = random_tensors(config, seed)
    rng = np.random.default_rng(seed + 100)
    h, vocab = config["hidden_size"], config["vocab_size"]
    d = config.get("head_dim") or h // config["num_attention_heads"]
    if config["model_type"] == "qwen3":
        for i in range(config["num_hidden_layers"]):
            for n in ("q_norm", "k_norm"):
                gain = 1 + 0.1 * rng.standard_normal(d)
                tensors[f"model.layers.{i}.self_attn.{n}.weight"] = gain.astype(np.float32)
    tensors["model.embed_tokens.weight"] = rng.standard_normal((vocab, h)).astype(np.float32)
    tensors["model.norm.weight"] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    if not config.get("tie_word_embeddings"):
        head = rng.standard_normal((vocab, h)) * h**-0.5
        tensors["lm_head.weight"] = head.astype(np.float32)
    return tensors


def write_model(folder: Path, config: dict, seed: int = 0, dtype: str = "float32") -> Path:
    """A save_pretrained folder of a random model; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model.safetensors", model_tensors(config, seed), dtype)
    (folder / "tokenizer.json").write_text(json.dumps(TOKENIZER_JSON))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 3]}))
    return folder


# The checkpoints tests/make_kit_fixtures.py runs through transformers (name -> config, seed)
FIXTURE_MODELS = {"llama": (KIT_LLAMA, 0), "qwen2": (KIT_QWEN2, 1), "qwen3": (KIT_QWEN3, 2)}
FIXTURE_PROMPT = [5, 17, 3, 250, 9, 1]
FIXTURE_NEW_TOKENS = 3
