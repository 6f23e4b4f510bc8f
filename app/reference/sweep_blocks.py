"""Worst normwise error of the transformer-block ops (ffn, attention, decoder_layer) over a seeded
sweep of random configs (the blocks' sample space, `config_space` in
app/kernels/transformer_params.py: the three ops on each config) and inputs: the evidence behind
their `tolerance`. Residual streams are
drawn at |x| around 1, around 1000, and with every token's largest |x| at 60000 (where x²
overflows fp16 and RMSNorm must rescale); decode calls get real RoPE tables for their positions
and a random valid cache length. Run `python -m app.reference.sweep_blocks [N]` (N configs per
op, default 40; a few minutes of CPU)."""

from __future__ import annotations

import sys

import numpy as np

from app.catalog_build import build_kernel
from app.kernels import CATALOG
from app.kernels.rope import rope_inputs
from app.kernels.space import RandomDraw
from app.kernels.transformer_params import config_space, fields_of
from app.reference.executor import Executor
from app.reference.verify import max_errors

OPS = ("ffn", "attention", "decoder_layer")


def draw_inputs(build, rng: np.random.Generator, amp: float, peak: bool) -> dict:
    p = build.params
    inputs = {}
    for var in build.program.main.inputs:
        shape = var.tensor.shape
        if var.name == "length":
            inputs["length"] = np.array([rng.integers(0, p.cache_len + 1)], np.int32)
        elif var.name in ("cos", "sin"):
            start = int(rng.integers(0, 4000))
            tables = rope_inputs(
                np.arange(start, start + p.seq_len), p.dim, p.rope_theta, p.rope_scaling
            )
            inputs[var.name] = tables[var.name]
        elif var.name == "x":
            values = amp * rng.standard_normal(shape)
            if peak:  # every token's largest |x| at 60000, where x² overflows fp16
                values *= 60000 / np.abs(values).max(axis=1, keepdims=True)
            inputs["x"] = values.astype(np.float16)
        else:
            inputs[var.name] = rng.standard_normal(shape).astype(np.float16)
    return inputs


def errors(op: str, config: dict, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """Per output: max|program − definition| / max|definition| over the three input regimes."""
    build = build_kernel(op, fields_of(CATALOG[op].params, config), random_seed=seed)
    worst: dict[str, float] = {}
    for amp, peak in ((1.0, False), (1000.0, False), (1.0, True)):
        inputs = draw_inputs(build, rng, amp, peak)
        result = Executor.from_written_weights(build.program).run(inputs)
        exact, _ = build.exact(inputs, {})
        for name, values in exact.items():
            err = max_errors(result.outputs[name], values)[1]
            worst[name] = max(worst.get(name, 0.0), err)
    return worst


def sweep(n: int = 40, seed: int = 321) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    worst: dict[str, float] = {}
    for i in range(n):
        config = config_space(RandomDraw(rng, i))
        for op in OPS:
            for err in errors(op, config, rng, i).values():
                worst[op] = max(worst.get(op, 0.0), err)
    return worst


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    for op, err in sweep(count).items():
        bound = CATALOG[op].tolerance
        print(f"{op:<14} worst {err:.2e}   tolerance {bound:.0e}   ({err / bound:.0%})")
