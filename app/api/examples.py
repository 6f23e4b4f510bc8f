"""Runnable examples for the operations that plan a model, upload a checkpoint and build a kit:
what Swagger UI (/docs) fills in, each answering 2xx as it is.

The examples that name blobs name the files of one tiny random Qwen3 checkpoint kept in the
repository, tests/fixtures/example-checkpoint (2 layers, hidden 32, vocabulary 260, fp16; written
by tests/kit_support.py's `write_model(KIT_QWEN3, seed=0, dtype="float16")`). Upload its files
first (POST /v1/blobs/uploads, as the uploads example starts, or `Client.upload_file`); then the
kit example builds, and the device-check example checks the kit it built.
tests/test_api_examples.py posts every example of the document in that order to a live service
and holds the digests here to the files.
"""

from __future__ import annotations

from typing import Any

# name -> (sha256, bytes) of each file of tests/fixtures/example-checkpoint
EXAMPLE_CHECKPOINT: dict[str, tuple[str, int]] = {
    "config.json": ("20012cb940c7aacfa3ff59306d1390ee94868fe8bdda62d518dda8c986d7df98", 372),
    "generation_config.json": (
        "bf65c8eddfeca5263bf5798abdf3f0359937a517f8e63f394295a8057c735bec",
        24,
    ),
    "model.safetensors": (
        "f909ed3c4111dbcb8312a2a9fcaa3abc572d582ee8c9107aea068fae75ec0fd4",
        62672,
    ),
    "tokenizer.json": ("8804d77ce4b12b864e78164251fa2c88ef07a94ea5c3af936a5aadf290d047cb", 279),
}
EXAMPLE_FILES = {name: f"sha256:{digest}" for name, (digest, _) in EXAMPLE_CHECKPOINT.items()}
EXAMPLE_HIDDEN = 32  # the example checkpoint's hidden_size
# An .mlpackage kit: a device check runs Core ML programs, and refuses a mil kit (docs/kits.md)
EXAMPLE_KIT_OPTIONS: dict[str, Any] = {"format": "mlpackage", "context": 16, "prefill": 4}
# The kit example's job id: the digest of its files' digests and options (ModelRequest.key);
# the device-check example names it.
EXAMPLE_KIT = "d40ccc33a09e9bd69e09a8365320ad2d4ab0e3cb79ce3feb1f0a6f071b34ccbc"

# Qwen3-0.6B's config.json, the keys the planner reads (huggingface.co/Qwen/Qwen3-0.6B)
QWEN3_0_6B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "rope_theta": 1000000,
}


def _upload(name: str) -> dict[str, Any]:
    digest, size = EXAMPLE_CHECKPOINT[name]
    return {"digest": f"sha256:{digest}", "bytes": size}


UPLOAD_EXAMPLES = {
    name.replace(".", "_"): {
        "summary": f"the example checkpoint's {name} (tests/fixtures/example-checkpoint)",
        "value": _upload(name),
    }
    for name in EXAMPLE_CHECKPOINT
}
MODEL_EXAMPLES = {
    "example_checkpoint": {
        "summary": "a kit of the example checkpoint (upload its files first)",
        "value": {"files": EXAMPLE_FILES, **EXAMPLE_KIT_OPTIONS},
    },
}
DEVICE_CHECK_EXAMPLES = {
    "example_kit_on_m4": {
        "summary": "the example checkpoint's kit on an M4 Mac (build it first: POST /v1/models)",
        "value": {"kit": EXAMPLE_KIT, "device": "m4", "max_new_tokens": 2},
    },
}
PLAN_EXAMPLES = {
    "qwen3_on_an_iphone": {
        "summary": "Qwen3-0.6B on an iPhone 16 Pro, 4-bit palettized",
        "value": {
            "config": QWEN3_0_6B,
            "device": "iPhone 16 Pro",
            "quantize": {"mode": "palettize", "nbits": 4},
            "context": 2048,
            "prefill": 64,
            "prompt": 512,
        },
    },
    "qwen3_on_a_mac": {
        "summary": "Qwen3-0.6B in fp16 on an M4 Mac, a short context",
        "value": {"config": QWEN3_0_6B, "device": "m4", "context": 512, "prefill": 64},
    },
}
