"""A decoder-only language model as the estimate model sees it: its shape, the precision its
weights are stored and streamed at, how its layers group into programs under a chip's envelope,
and the work (FLOPs, bytes) of one decode step or one prefill chunk per program.

Pure arithmetic over the device table: the planner (app/planner) builds a `DecoderShape` from a
config.json, the calibration (app/devices/calibration.py) from the published models' shapes.
Choices, and why:

- the embedding is a gather on the CPU (the ANE has no gather: preflight `op.unsupported`), so it
  is held in memory but not streamed; the head (tied or not) is streamed every step;
- the head runs in programs of its own (as Anemll and CoreML-LLM ship it), split into as many
  as the envelope needs; a vocabulary over the chip's largest axis is tiled inside them;
- a static KV cache is read whole every step (Core ML states and ANE-direct caches have fixed
  shapes), so decode reads `context` rows per layer, not the tokens so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.devices.estimate_model import Work
from app.devices.table import Chip

FP16_BYTES = 2


@dataclass(frozen=True)
class Precision:
    """How the weights are stored: fp16, int8 (linear), or palettized with `bits` per index."""

    kind: str  # "fp16" | "int8" | "palettize"
    bits: int

    @property
    def name(self) -> str:
        return {"fp16": "fp16", "int8": "int8"}.get(self.kind, f"{self.bits}-bit palettized")

    def stored_bytes(self, params: float) -> float:
        return params * self.bits / 8

    def streams_compressed(self, chip: Chip) -> bool:
        """Whether the chip's ANE reads these weights compressed (else it reads them as fp16)."""
        if self.kind == "int8":
            return bool(chip.streams_int8.value)
        if self.kind == "palettize":
            return bool(chip.streams_palettized.value)
        return True

    def streamed_bytes(self, chip: Chip, params: float) -> float:
        if self.streams_compressed(chip):
            return self.stored_bytes(params)
        return params * FP16_BYTES


FP16 = Precision("fp16", 16)
INT8 = Precision("int8", 8)


def palettized(bits: int) -> Precision:
    return Precision("palettize", bits)


# The look-up table sizes a palettized weight can have: 2^bits entries, as coremltools'
# OpPalettizerConfig takes them (app/quantize reads its table from here).
PALETTE_BITS = (1, 2, 3, 4, 6, 8)
# Every precision the estimate models, by name: what a plan, a kit's report or a measured row
# may name.
PRECISIONS: dict[str, Precision] = {
    p.name: p for p in (FP16, INT8, *(palettized(bits) for bits in PALETTE_BITS))
}


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True
    mlp_matrices: int = 3  # gated (SwiGLU) MLPs have three, GPT-2's two

    @property
    def layer_params(self) -> int:
        q_and_o = 2 * self.hidden * self.heads * self.head_dim
        k_and_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_and_o + k_and_v + self.mlp_matrices * self.hidden * self.intermediate

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def embedding_params(self) -> int:
        """The embedding table held apart from the head (none when they are tied)."""
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.head_params + self.embedding_params

    def kv_bytes(self, context: int) -> int:
        """fp16 K and V rows of one layer's cache of `context` positions."""
        return 2 * context * self.kv_heads * self.head_dim * FP16_BYTES

    def attention_flops(self, queries: int, keys: int) -> int:
        """QK^T and the weighted sum of V, per layer."""
        return 4 * queries * keys * self.heads * self.head_dim


@dataclass(frozen=True)
class Grouping:
    """Layers per program, in order, and the head's programs and vocabulary tiles."""

    layer_groups: tuple[int, ...]
    head_programs: int
    head_tiles: int

    @property
    def programs(self) -> int:
        return len(self.layer_groups) + self.head_programs


def group_layers(shape: DecoderShape, precision: Precision, chip: Chip) -> Grouping:
    """As many whole layers per program as the chip's envelope holds (at least one: a layer
    over the envelope is the planner's to refuse), the head in as few programs as hold it."""
    envelope = chip.program_weight_bytes.value
    groups = layer_groups(shape.layers, precision.stored_bytes(shape.layer_params), envelope)
    head = max(1, math.ceil(precision.stored_bytes(shape.head_params) / envelope))
    tiles = max(1, math.ceil(shape.vocab / chip.axis_max.value))
    return Grouping(groups, head, max(tiles, head))


def layer_groups(layers: int, layer_bytes: float, envelope: float) -> tuple[int, ...]:
    """How many consecutive layers each program holds: as many as the envelope takes (at least
    one: a layer over it is for the caller to refuse or report), then evened out (7 + 7 + 2 ->
    6 + 5 + 5: the same number of programs, a smaller peak). The one rule for the planner and
    the kits."""
    per_program = max(1, int(envelope // layer_bytes)) if layer_bytes else layers
    count = math.ceil(layers / per_program)
    return tuple(layers // count + (1 if i < layers % count else 0) for i in range(count))


def decode_works(
    shape: DecoderShape,
    precision: Precision,
    chip: Chip,
    grouping: Grouping,
    context: int,
    head: Precision | None = None,
) -> list[Work]:
    """One generated token: every layer program, then the head's (at `head`, default the
    layers' precision)."""
    works = []
    for layers in grouping.layer_groups:
        params = layers * shape.layer_params
        works.append(
            Work(
                flops=2 * params + layers * shape.attention_flops(1, context),
                weight_bytes=precision.streamed_bytes(chip, params),
                activation_bytes=layers * shape.kv_bytes(context) + 2 * shape.hidden * FP16_BYTES,
            )
        )
    works += _head(shape, head or precision, chip, grouping)
    return works


def _head(shape: DecoderShape, precision: Precision, chip: Chip, grouping: Grouping) -> list[Work]:
    part = shape.head_params / grouping.head_programs
    logits = shape.vocab * FP16_BYTES / grouping.head_programs
    return [Work(2 * part, precision.streamed_bytes(chip, part), logits)] * grouping.head_programs


def prefill_works(
    shape: DecoderShape,
    precision: Precision,
    chip: Chip,
    grouping: Grouping,
    tokens: int,
    chunk: int,
    head: Precision | None = None,
) -> list[Work]:
    """A prompt of `tokens`, `chunk` positions per dispatch of each layer program (weights read
    once per chunk), then the head once for the first generated token."""
    works = []
    for start in range(0, tokens, chunk):
        queries = min(chunk, tokens - start)
        for layers in grouping.layer_groups:
            params = layers * shape.layer_params
            works.append(
                Work(
                    flops=2 * params * queries
                    + layers * shape.attention_flops(queries, start + queries),
                    weight_bytes=precision.streamed_bytes(chip, params),
                    activation_bytes=layers * shape.kv_bytes(start + queries)
                    + 2 * queries * shape.hidden * FP16_BYTES,
                )
            )
    return works + _head(shape, head or precision, chip, grouping)


def dense_decode_works(
    params: float, precision: Precision, chip: Chip, programs: int
) -> list[Work]:
    """One token of a model known only by its parameter count (all of it streamed per token),
    run as `programs` equal programs."""
    part = params / programs
    return [Work(2 * part, precision.streamed_bytes(chip, part))] * programs
