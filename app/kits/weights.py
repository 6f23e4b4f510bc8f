"""A kit's weights at one precision, as the float64 quality gate (app/kits/gate.py) reads them:
one layer at a time, the embedding rows of the tokens asked for, the head a piece at a time.

- `ExactWeights`: the checkpoint's own values (bf16, fp16, fp32 or fp64) in float64, never
  rounded to fp16: what the model is before the kit stores anything.
- `Fp16Weights`: what a kit without quantization computes with (the fp16 conversion the kit
  builder makes, app/kits/causal_lm.py).
- `QuantizedWeights`: the fp16 weights with the decoder projections and the head compressed by a
  quantize config each and decompressed, as the programs rebuild them (app/quantize), each head
  piece compressed on its own as the kit's head programs are.
- `HeldWeights`-backed: the weights a built kit's programs hold (app/kits/held.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from app.checkpoints.files import Tensor
from app.checkpoints.load import locate
from app.kernels.catalog import get_op
from app.kits.causal_lm import STACK, Model
from app.kits.held import HeldWeights
from app.kits.programs import TARGET
from app.mil.types import DType
from app.quantize import QuantizeConfig


class KitWeights(Protocol):
    def layer(self, i: int) -> Mapping[str, np.ndarray]: ...
    def embeddings(self, ids: Sequence[int]) -> np.ndarray: ...
    def norm(self) -> np.ndarray: ...
    def head_pieces(self) -> Iterator[np.ndarray]: ...


def _exact(tensor: Tensor, rows: range | None = None) -> np.ndarray:
    """A tensor's values (or rows of them) in float64, read as the checkpoint stores them."""
    source = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64}
    kind = source[tensor.dtype]  # the kit builder has refused other dtypes by now
    shape, offset = tensor.shape, tensor.offset
    if rows is not None:
        offset += rows.start * (tensor.nbytes // shape[0])
        shape = (len(rows), *shape[1:])
    raw = np.memmap(tensor.path, kind, "r", offset, shape)
    if tensor.dtype == "BF16":  # bf16 is the upper half of an fp32
        values = (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        values = raw.astype(np.float64)
    del raw
    return values


@dataclass
class ExactWeights:
    model: Model
    head_rows: Sequence[range]

    def layer(self, i: int) -> dict[str, np.ndarray]:
        parsed = self.model.stack_params(i, 1, seq_len=1)
        located = locate(STACK, parsed, self.model.tensors, i, self.model.prefix)
        return {name: _exact(t) for name, t in located.items()}

    def _whole(self, name: str) -> Tensor:
        return self.model.tensors[name]

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        table = self._whole(f"{self.model.prefix}embed_tokens.weight")
        return np.stack([_exact(table, range(t, t + 1))[0] for t in ids])

    def norm(self) -> np.ndarray:
        return _exact(self._whole(f"{self.model.prefix}norm.weight"))

    def head_pieces(self) -> Iterator[np.ndarray]:
        name = f"{self.model.prefix}embed_tokens.weight" if self.model.tied else "lm_head.weight"
        for rows in self.head_rows:
            yield _exact(self._whole(name), rows)


@dataclass
class Fp16Weights:
    model: Model
    head_rows: Sequence[range]

    def layer(self, i: int) -> Mapping[str, np.ndarray]:
        return self.model.layer_weights(i, 1)

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        return np.stack([self.model.embedding_rows(range(t, t + 1))[0] for t in ids])

    def norm(self) -> np.ndarray:
        return self.model.final_norm()

    def head_pieces(self) -> Iterator[np.ndarray]:
        for rows in self.head_rows:
            yield self.model.head_rows(rows)


def quantizable(model: Model, i: int) -> list[str]:
    """Layer i's weights a kit's quantize config compresses (the decoder_stack op's)."""
    parsed = model.stack_params(i, 1, seq_len=1)
    return [s.name for s in get_op(STACK).weights(parsed) if s.quantizable]


def decompressed(weight: np.ndarray, config: QuantizeConfig) -> np.ndarray:
    """The weight as a program rebuilds it from its compressed form."""
    from app.quantize.compress import quantize  # coremltools' arithmetic: loaded when used

    return quantize(weight, config, TARGET, dtype=DType.FP16).decompressed


@dataclass
class QuantizedWeights:
    base: Fp16Weights
    layers_config: QuantizeConfig | None
    head_config: QuantizeConfig | None
    _names: dict[int, list[str]] = field(default_factory=dict)

    def layer(self, i: int) -> Mapping[str, np.ndarray]:
        weights = dict(self.base.layer(i))
        if self.layers_config is not None:
            names = self._names.setdefault(i, quantizable(self.base.model, i))
            for name in names:
                weights[name] = decompressed(weights[name], self.layers_config)
        return weights

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        return self.base.embeddings(ids)

    def norm(self) -> np.ndarray:
        return self.base.norm()

    def head_pieces(self) -> Iterator[np.ndarray]:
        for rows in self.base.head_pieces():
            yield rows if self.head_config is None else decompressed(rows, self.head_config)


@dataclass
class KitHeldWeights:
    """What a built kit's programs compute with, and its fp16 tables."""

    held: HeldWeights
    table: np.ndarray  # the kit's fp16 embedding table
    final_norm: np.ndarray

    def layer(self, i: int) -> Mapping[str, np.ndarray]:
        return self.held.layer(i)

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        return np.asarray(self.table[list(ids)])

    def norm(self) -> np.ndarray:
        return self.final_norm

    def head_pieces(self) -> Iterator[np.ndarray]:
        for piece in self.held.head_pieces():
            yield piece.reshape(len(piece), -1)


def describe(config: Any) -> str:
    """A rung's name in reports: fp16, int8, 4-bit palettes."""
    if config is None:
        return "fp16"
    if config.mode == "palettize":
        return f"{config.nbits}-bit palettes"
    if config.mode == "linear":
        return config.dtype
    return f"pruned {config.target_sparsity}"
