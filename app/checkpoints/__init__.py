"""Weights from Hugging Face safetensors checkpoints: one file or shards, F16/BF16/F32 tensors
memory-mapped and converted to fp16 chunk by chunk, config.json read into the block ops' params.

    from app.checkpoints import load
    loaded = load("decoder_layer", "model.safetensors", "config.json", 3, {"seq_len": 64})
    kernel_zip("decoder_layer", loaded.params, loaded.weights)
"""

from app.checkpoints.config import params_from_config, read_config
from app.checkpoints.files import Tensor, open_checkpoint
from app.checkpoints.load import (
    CHECKPOINT_OPS,
    Loaded,
    Resolved,
    layer_prefix,
    load,
    parse_layers,
    resolve,
)
from app.checkpoints.reference import CheckpointReference, check_role

__all__ = [
    "CHECKPOINT_OPS",
    "CheckpointReference",
    "Loaded",
    "Resolved",
    "Tensor",
    "check_role",
    "layer_prefix",
    "load",
    "open_checkpoint",
    "params_from_config",
    "parse_layers",
    "read_config",
    "resolve",
]
