"""The quality gate and `quantize auto` in a kit build: the prompts and thresholds read once,
the checkpoint's float64 logits computed once and shared by both."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from app.kits.gate import (
    Prompts,
    Thresholds,
    check_thresholds,
    final_hidden,
    gate_report,
    logits,
    seeded_prompts,
    text_prompts,
)
from app.kits.model import Model
from app.kits.weights import ExactWeights, Fp16Weights, KitWeights

if TYPE_CHECKING:
    from app.kits.build import KitOptions


@dataclass
class Quality:
    prompts: Prompts
    thresholds: Thresholds
    reference: np.ndarray | None = None  # the checkpoint's logits over the prompts
    auto: dict[str, Any] | None = None  # what `quantize auto` tried and chose

    @classmethod
    def of(cls, model: Model, options: KitOptions, context: int) -> Quality:
        if options.prompts is not None:
            prompts = text_prompts(options.prompts, model.tokenizer_files(), context)
        else:
            prompts = seeded_prompts(model.vocab_size, context)
        return cls(prompts, check_thresholds(options.max_kl, options.min_top1))

    def choose(
        self,
        model: Model,
        options: KitOptions,
        head_rows: Sequence[range],
        say: Callable[[str], None],
    ) -> KitOptions:
        """The options with `quantize auto` resolved to the settings it chose."""
        from app.kits.auto import choose

        resolved, self.auto, self.reference = choose(
            model, options.quantize, head_rows, self.prompts, self.thresholds, say
        )
        return replace(options, quantize=resolved or None)

    def gate(self, model: Model, kit: KitWeights, head_rows: Sequence[range]) -> dict[str, Any]:
        """kit.json's `quality` for a kit whose programs hold `kit`'s weights."""
        params = model.stack_params(0, 1, seq_len=1)

        def run(weights: KitWeights) -> np.ndarray:
            hidden = final_hidden(params, model.num_layers, weights, self.prompts)
            return logits(hidden, weights.head_pieces())

        if self.reference is None:
            self.reference = run(ExactWeights(model, head_rows))
        fp16 = run(Fp16Weights(model, head_rows))
        return gate_report(run(kit), fp16, self.reference, self.prompts, self.thresholds)
