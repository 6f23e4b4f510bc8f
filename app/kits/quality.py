"""The quality gate and `quantize auto` in a kit build: the prompts and thresholds read once,
the checkpoint's float64 logits computed once and shared by both."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.kits.causal_lm import Model
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
from app.kits.weights import ExactWeights, Fp16Weights, KitWeights


@dataclass
class Quality:
    prompts: Prompts
    thresholds: Thresholds
    reference: np.ndarray | None = None  # the checkpoint's logits over the prompts
    auto: dict[str, Any] | None = None  # what `quantize auto` tried and chose

    @classmethod
    def of(
        cls,
        model: Model,
        context: int,
        prompts_file: str | Path | None,
        max_kl: float | None,
        min_top1: float | None,
    ) -> Quality:
        if prompts_file is not None:
            prompts = text_prompts(prompts_file, model.tokenizer_files(), context)
        else:
            prompts = seeded_prompts(model.vocab_size, context)
        return cls(prompts, check_thresholds(max_kl, min_top1))

    def choose(
        self,
        model: Model,
        quantize: Mapping[str, Any] | str,
        head_rows: Sequence[range],
        say: Callable[[str], None],
        allowed: Callable[[str, dict[str, Any] | None], bool] | None = None,
    ) -> Mapping[str, Any] | None:
        """The quantize option with `auto` resolved to the settings it chose (among the rungs
        `allowed` takes, every rung when None)."""
        from app.kits.auto import choose

        resolved, self.auto, self.reference = choose(
            model,
            quantize,
            head_rows,
            self.prompts,
            self.thresholds,
            say,
            allowed or (lambda part, config: True),
        )
        return resolved or None

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
