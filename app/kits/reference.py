"""The whole model in float64, from the transformer blocks' definitions (app/kernels/
transformer_reference.py): embeddings gathered, every decoder layer over the whole sequence
(causal attention, no cache), the final RMSNorm, the lm_head. What a kit's logits are held to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.kernels.common import f64
from app.kernels.rope import tables
from app.kernels.transformer_params import DecoderParams
from app.kernels.transformer_reference import attention, mlp, rms_norm


@dataclass(frozen=True)
class WholeModel:
    params: DecoderParams  # the decoder's config (seq_len and modes unused here)
    num_layers: int
    layers: Mapping[str, np.ndarray]  # `layers.<i>.<tensor>`, as the programs compute with
    embeddings: np.ndarray  # [vocab, hidden]
    norm: np.ndarray  # [hidden]
    head: np.ndarray  # [vocab, hidden]

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """[len(ids), vocab]: every position's next-token logits."""
        p = self.params
        x = f64(self.embeddings[list(ids)])
        cos, sin = tables(np.arange(len(ids)), p.dim, p.rope_theta, p.rope_scaling)
        for i in range(self.num_layers):
            x, _, _ = attention(p, x, self.layers, f"layers.{i}.", cos, sin)
            x = mlp(p, x, self.layers, f"layers.{i}.", norm=True, residual=True)
        return rms_norm(x, self.norm, p.rms_norm_eps) @ f64(self.head).reshape(len(self.head), -1).T
