"""The whole model in float64, from the transformer blocks' definitions (app/kernels/
transformer_reference.py): embeddings gathered, every decoder layer over the whole sequence
(causal attention, no cache), the final RMSNorm, the lm_head. What a kit's logits are held to.

A model of billions of parameters is never held whole in float64, nor its weights at once:
the layers' weights come from a source asked for one layer at a time (and let go before the
next is asked for), and the head's logits are computed a piece of rows at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.kernels.common import f64
from app.kernels.rope import tables
from app.kernels.transformer_params import DecoderParams
from app.kernels.transformer_reference import attention, mlp, rms_norm

# Layer i -> its weights, named `layers.<i>.<tensor>`, as the programs compute with them
LayerWeights = Callable[[int], Mapping[str, np.ndarray]]
HEAD_ROWS = 8192  # head rows in float64 at a time: 8,192 × 2,048 × 8 bytes = 128 MiB


@dataclass(frozen=True)
class WholeModel:
    params: DecoderParams  # the decoder's config (seq_len and modes unused here)
    num_layers: int
    layers: Mapping[str, np.ndarray] | LayerWeights  # all layers' weights, or a layer's source
    embeddings: np.ndarray  # [vocab, hidden]: only the rows of the tokens asked for are read
    norm: np.ndarray  # [hidden]
    head: np.ndarray | Sequence[np.ndarray]  # [vocab, hidden], or its row pieces in order

    def layer(self, i: int) -> Mapping[str, np.ndarray]:
        return self.layers(i) if callable(self.layers) else self.layers

    def head_pieces(self) -> Iterator[np.ndarray]:
        pieces = [self.head] if isinstance(self.head, np.ndarray) else self.head
        for piece in pieces:
            rows = piece.reshape(len(piece), -1)
            for start in range(0, len(rows), HEAD_ROWS):
                yield rows[start : start + HEAD_ROWS]

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """[len(ids), vocab]: every position's next-token logits."""
        p = self.params
        x = f64(self.embeddings[list(ids)])
        cos, sin = tables(np.arange(len(ids)), p.dim, p.rope_theta, p.rope_scaling)
        for i in range(self.num_layers):
            weights = self.layer(i)
            x, _, _ = attention(p, x, weights, f"layers.{i}.", cos, sin)
            x = mlp(p, x, weights, f"layers.{i}.", norm=True, residual=True)
            del weights  # this layer's weights go before the next layer's are asked for
        normed = rms_norm(x, self.norm, p.rms_norm_eps)
        return np.concatenate([normed @ f64(rows).T for rows in self.head_pieces()], axis=1)
