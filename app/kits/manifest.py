"""kit.json: what an app needs to know to run a kit, versioned (`kit_version`); docs/kits.md
documents every key.

    kit_version      2 (1 lacked each program's `preflight`; the runner reads both)
    architecture     the config's model_type, architectures and the decoder's dimensions
    format, target   mlpackage | mlmodelc | mil; ios18
    context          positions the KV cache holds; `prefill`: tokens per prefill chunk
    kv               "io" (cache as inputs, new rows as outputs) or "state" (ios18 states)
    programs         in run order: decoder chunks (layers, kv_cache layout, functions prefill and
                     decode with their inputs/states/outputs), then the head pieces (vocabulary
                     range [start, stop), function main), each with its weight bytes and its ANE
                     preflight findings (as kernel.json holds a kernel's)
    positions        how `length`, `cos` and `sin` are fed
    embeddings       the table file: shape [vocab, hidden], fp16 little-endian, row-major
    rope             the cos/sin table file: [2, context, head_dim] fp16 (cos, then sin)
    special_tokens   bos/eos/pad ids from config.json and generation_config.json
    tokenizer        the tokenizer files copied verbatim
    plan             how layers were grouped and the head split, under which limits
    verification     the summary of verification.json, when the kit was verified
    files            sha256 of every other file in the zip
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

KIT_JSON = "kit.json"
KIT_VERSION = 2
# What the runner reads: kit_version 1 differs only in lacking each program's `preflight`, which
# running a kit does not need.
READABLE_KIT_VERSIONS = (1, KIT_VERSION)
EMBEDDINGS_FILE = "embeddings.f16"
ROPE_FILE = "rope.f16"

POSITIONS = {
    "length": "int32 [1]: positions the cache already holds; a call's tokens are at "
    "length .. length + T − 1",
    "cos_sin": "rows length .. length + T − 1 of the rope table, transposed to [1, 1, head_dim, T]",
    "io": "after each call, write the first (real) rows of every k_<i>, v_<i> output into "
    "k_cache_<i>, v_cache_<i> at rows length..; then length grows by the real tokens",
    "state": "the programs write their new rows into the states themselves (length + T must not "
    "pass context); create one state per decoder program and pass it to both functions",
    "padding": "a prefill chunk shorter than `prefill` is padded at its end (any token): causal "
    "attention keeps real tokens from seeing the padding, whose rows are never kept",
}


# What is known of in-graph state on the ANE (docs/kits.md); kit.json carries it with kv "state"
STATE_NOTE = (
    "reported: the ANE compiler rejects in-graph state mutation on some chips (ANECCompile -14 "
    "for a stateful Qwen3-0.6B decode on M5 Pro, FluidInference/mobius PR #77), stateful "
    "models running on CPU_AND_GPU only (apple/coremltools #2325), and state dimensions needing "
    "multiples of 32 (apple/coremltools #2631); kv io avoids all of it"
)


def digests(files: Mapping[str, bytes]) -> dict[str, str]:
    return {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())}


def to_bytes(meta: Mapping[str, Any]) -> bytes:
    return (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
