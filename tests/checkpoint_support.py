"""Small random Llama-family checkpoints written by the tests: config.json plus safetensors with
Hugging Face's tensor names (`model.layers.<i>.self_attn.q_proj.weight` ...), in float32, float16
or bfloat16, in one file or sharded with model.safetensors.index.json.

bfloat16 has no NumPy dtype, so the files are written here directly in the safetensors layout
(8-byte little-endian header length, the JSON header, the tensors' bytes): bf16 values are the top
16 bits of their float32 values (truncated, which is one valid bf16 rounding)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 3,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
}
LAYER_TENSORS = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)


def layer_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Each layer tensor's shape, as Hugging Face stores it."""
    h, i = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    d = config.get("head_dim") or h // heads
    q, kv = heads * d, config.get("num_key_value_heads", heads) * d
    shapes = {
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (q, h),
        "self_attn.k_proj.weight": (kv, h),
        "self_attn.v_proj.weight": (kv, h),
        "self_attn.o_proj.weight": (h, q),
        "mlp.gate_proj.weight": (i, h),
        "mlp.up_proj.weight": (i, h),
        "mlp.down_proj.weight": (h, i),
    }
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        shapes |= {
            "self_attn.q_proj.bias": (q,),
            "self_attn.k_proj.bias": (kv,),
            "self_attn.v_proj.bias": (kv,),
        }
        if config.get("model_type") != "qwen2":
            shapes["self_attn.o_proj.bias"] = (h,)
    return shapes


def random_tensors(config: dict, seed: int = 0, prefix: str = "model.") -> dict[str, np.ndarray]:
    """float32 tensors of every layer (gains around 1, matrices scaled by 1/sqrt(fan-in))."""
    rng = np.random.default_rng(seed)
    out = {}
    for layer in range(config["num_hidden_layers"]):
        for name, shape in layer_shapes(config).items():
            if name.endswith("layernorm.weight"):
                values = 1 + 0.1 * rng.standard_normal(shape)
            elif name.endswith("bias"):
                values = 0.1 * rng.standard_normal(shape)
            else:
                values = rng.standard_normal(shape) * shape[1] ** -0.5
            out[f"{prefix}layers.{layer}.{name}"] = values.astype(np.float32)
    out[f"{prefix}norm.weight"] = np.ones(config["hidden_size"], np.float32)
    return out


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str = "float32") -> None:
    """tensors (float32) stored as F32, F16 or BF16."""
    header, blobs, offset = {}, [], 0
    for name, values in tensors.items():
        if dtype == "bfloat16":
            data, code = to_bf16_bits(values).tobytes(), "BF16"
        else:
            data = np.ascontiguousarray(values, dtype).tobytes()
            code = {"float32": "F32", "float16": "F16"}[dtype]
        header[name] = {
            "dtype": code,
            "shape": list(values.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_checkpoint(
    directory: Path,
    config: dict | None = None,
    *,
    dtype: str = "float32",
    seed: int = 0,
    shards: int = 1,
    tensors: dict[str, np.ndarray] | None = None,
) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """(the checkpoint path to pass — model.safetensors or the index —, config.json, the tensors
    as float32 values exactly as stored)."""
    config = dict(config or LLAMA)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = tensors if tensors is not None else random_tensors(config, seed)
    if dtype == "bfloat16":
        tensors = {k: from_bf16_bits(to_bf16_bits(v)) for k, v in tensors.items()}
    elif dtype == "float16":
        tensors = {k: v.astype(np.float16).astype(np.float32) for k, v in tensors.items()}
    config_path = directory / "config.json"
    config_path.write_text(json.dumps(config))
    if shards == 1:
        path = directory / "model.safetensors"
        write_safetensors(path, tensors, dtype)
        return path, config_path, tensors
    names = sorted(tensors)
    weight_map = {}
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::shards]}
        write_safetensors(directory / file, part, dtype)
        weight_map |= {n: file for n in part}
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return index, config_path, tensors


def layer_weights(tensors: dict[str, np.ndarray], layer: int, prefix: str = "model.") -> dict:
    """One layer's tensors named relative to the layer, as the block ops take them."""
    head = f"{prefix}layers.{layer}."
    return {k.removeprefix(head): v for k, v in tensors.items() if k.startswith(head)}


def op_params(config: dict, **call) -> dict:
    """A decoder layer's params from a config (the keys the ops take) and the call's own."""
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "rope_scaling",
        "attention_bias",
        "hidden_act",
    )
    return {k: config[k] for k in keys if k in config} | call
