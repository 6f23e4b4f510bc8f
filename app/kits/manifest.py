"""kit.json: what an app needs to know to run a kit, versioned (`kit_version`); docs/kits.md
documents every key.

    kit_version      3 (2 recorded an older `plan` and no `warnings`; 1 also lacked each
                     program's `preflight`; the runner reads all three)
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
    plan             the planner's plan of this kit (app/planner): its layout (envelope,
                     programs with their weight bytes and functions, the head's split rule,
                     each part's precision) and, for a device, the prediction
    warnings         a quantization reported failing or not modelled, too many live functions
    verification     the summary of verification.json, when the kit was verified
    files            sha256 of every other file in the zip

A kit read back (app/kits/runner.py) is a file a user hands in: its kit.json is read through the
bounded JSON reader (app/core/jsonfile.py) into `KitManifest`, strictly, and checked against itself
(the tables' shapes against the architecture and the context, the programs' layers and
vocabulary covering the model once each, the KV cache's shape and size) before any of it is
used; the zip's members are checked against `files` by the runner.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.checkpoints.config import MAX_DIM, MAX_LAYERS, SpecialTokens
from app.core.formats import KIT_FORMATS
from app.schemas.plans import MAX_CONTEXT

KIT_JSON = "kit.json"
KIT_VERSION = 3
# What the runner reads: kit_version 1 differs only in lacking each program's `preflight`, and 2
# in its `plan` (the old layout record) and lacking `warnings`, none of which running a kit needs.
READABLE_KIT_VERSIONS = (1, 2, KIT_VERSION)
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


# -- kit.json read back ----------------------------------------------------------------------------

# The most KV cache a session of a kit may hold (every layer's keys and values, fp16): the
# reference executor runs kits on the CPU, and a kit.json must not make it allocate more than a
# machine has. An 8B model (32 layers, 8 KV heads of 128) at a context of 32,768 needs 4.3 GB.
MAX_CACHE_BYTES = 16 << 30
MAX_PROGRAMS = 2 * MAX_LAYERS  # every layer a program, and as many head pieces
Size = Annotated[int, Field(ge=1, le=MAX_DIM)]
Index = Annotated[int, Field(ge=0, le=MAX_DIM)]
Range = Annotated[list[Index], Field(min_length=2, max_length=2)]
MemberPath = Annotated[str, Field(min_length=1, max_length=1024)]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_OPEN = ConfigDict(extra="allow")  # kit.json says more than a reader needs: it passes


class TableEntry(BaseModel):
    model_config = _OPEN

    path: MemberPath
    shape: Annotated[list[Size], Field(min_length=2, max_length=3)]


class CacheEntry(BaseModel):
    model_config = _OPEN

    shape: Annotated[
        list[Annotated[int, Field(ge=1, le=MAX_CONTEXT)]], Field(min_length=4, max_length=4)
    ]


class ProgramEntry(BaseModel):
    model_config = _OPEN

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]
    role: Literal["decoder", "head"]
    path: MemberPath
    weight_bytes: Annotated[int, Field(ge=0)] = 0
    layers: Range | None = None
    vocab: Range | None = None
    kv_cache: CacheEntry | None = None

    @model_validator(mode="after")
    def _has_its_role_keys(self) -> ProgramEntry:
        wanted = ("layers", "kv_cache") if self.role == "decoder" else ("vocab",)
        missing = [k for k in wanted if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.role} program needs {missing[0]}")
        span = self.layers if self.role == "decoder" else self.vocab
        assert span is not None  # a missing one is refused just above
        if span[0] > span[1] or (self.role == "head" and span[0] == span[1]):
            raise ValueError(f"{span} is not a range")
        return self


class KitArchitecture(BaseModel):
    model_config = _OPEN

    model_type: Annotated[str, Field(max_length=256)]
    num_hidden_layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)]
    hidden_size: Size
    vocab_size: Size
    num_attention_heads: Size
    num_key_value_heads: Size
    head_dim: Size


class KitManifest(BaseModel):
    """kit.json as the runner reads it: every key it uses, typed, bounded and consistent."""

    model_config = _OPEN

    # Literals of tuples kept elsewhere: pydantic reads their values, a checker needs them spelled
    kit_version: Literal[READABLE_KIT_VERSIONS]  # type: ignore[valid-type]
    format: Literal[KIT_FORMATS]  # type: ignore[valid-type]
    kv: Literal["io", "state"]
    context: Annotated[int, Field(ge=1, le=MAX_CONTEXT)]
    prefill: Annotated[int, Field(ge=1, le=MAX_CONTEXT)]
    architecture: KitArchitecture
    programs: Annotated[list[ProgramEntry], Field(min_length=2, max_length=MAX_PROGRAMS)]
    embeddings: TableEntry
    rope: TableEntry
    special_tokens: SpecialTokens = SpecialTokens()
    quantize: dict[str, Any] | None = None
    files: Annotated[dict[MemberPath, Digest], Field(max_length=1 << 16)]

    @model_validator(mode="after")
    def _consistent(self) -> KitManifest:
        arch = self.architecture
        if self.prefill > self.context:
            raise ValueError(f"prefill {self.prefill} is over the context of {self.context}")
        if self.embeddings.shape != [arch.vocab_size, arch.hidden_size]:
            raise ValueError(
                f"embeddings.shape {self.embeddings.shape} is not [vocab_size, hidden_size]"
            )
        if self.rope.shape != [2, self.context, arch.head_dim]:
            raise ValueError(f"rope.shape {self.rope.shape} is not [2, context, head_dim]")
        if arch.num_key_value_heads > arch.num_attention_heads:
            raise ValueError("architecture.num_key_value_heads is over num_attention_heads")
        names = [p.name for p in self.programs]
        if len(set(names)) != len(names):
            raise ValueError("two programs have one name")
        _covers(
            [p.layers for p in self.programs if p.role == "decoder"],
            arch.num_hidden_layers,
            "layers",
            last=True,
        )
        _covers(
            [p.vocab for p in self.programs if p.role == "head"],
            arch.vocab_size,
            "vocab",
            last=False,
        )
        cache = [1, arch.num_key_value_heads, self.context, arch.head_dim]
        for program in self.programs:
            if program.kv_cache is not None and program.kv_cache.shape != cache:
                raise ValueError(
                    f"{program.name}: kv_cache.shape {program.kv_cache.shape} is not "
                    "[1, num_key_value_heads, context, head_dim]"
                )
        held = (
            2 * 2 * arch.num_hidden_layers * arch.num_key_value_heads * self.context * arch.head_dim
        )
        if held > MAX_CACHE_BYTES:
            raise ValueError(
                f"a session would hold {held} bytes of KV cache, over the {MAX_CACHE_BYTES} a "
                "kit may ask for"
            )
        return self


def _covers(spans: list[Any], count: int, key: str, *, last: bool) -> None:
    """`spans` ([first, last] inclusive, or [start, stop)) cover 0..count once, in order."""
    at = 0
    for first, end in spans:
        if first != at:
            raise ValueError(f"the programs' {key} do not run on from {at} (one starts at {first})")
        at = end + 1 if last else end
    if at != count:
        raise ValueError(f"the programs' {key} end at {at}, not at the model's {count}")
