"""Worst normwise error of each catalog op over a seeded sweep of random shapes (drawn from the
op's `param_space`) and inputs: the evidence behind each catalog op's `tolerance`. Run
`python -m app.reference.sweep [N]` (N shapes per op, default 60; a minute of CPU at most)."""

from __future__ import annotations

import sys

import numpy as np

from app.catalog_build import build_kernel
from app.kernels import CATALOG
from app.kernels.space import RandomDraw
from app.reference.executor import Executor
from app.reference.verify import max_errors


def _error(
    op: str, params: dict, rng: np.random.Generator, amp: float, peak: bool, seed: int
) -> float:
    build = build_kernel(op, params, random_seed=seed)
    inputs = {}
    for var in build.program.main.inputs:
        values = amp * rng.standard_normal(var.tensor.shape)
        if peak:  # every position's largest |x| at 60000, where x² overflows fp16
            values *= 60000 / np.abs(values).max(axis=1, keepdims=True)
        inputs[var.name] = values.astype(var.tensor.dtype.numpy)
    got = Executor.from_written_weights(build.program).run(inputs).outputs["y"]
    exact, _ = build.exact(inputs, {})
    return max_errors(got, exact["y"])[1]


# The ops swept here (the blocks are app/reference/sweep_blocks.py; data movement is bit-exact).
SWEPT = ("conv", "matmul", "scale", "identity", "rmsnorm", "sdpa")


def sweep(n: int = 60, seed: int = 123) -> dict[str, float]:
    """Each op's params drawn from its own sample space (`param_space`), at full size."""
    rng = np.random.default_rng(seed)
    worst: dict[str, float] = {}
    for i in range(n):
        for op in SWEPT:
            params = CATALOG[op].param_space(RandomDraw(rng, i))
            amp, peak = 1.0, False
            if op == "rmsnorm":  # a norm is judged over any scale of input, and past x² overflow
                amp, peak = float(10 ** rng.uniform(-2, 2)), i % 3 == 0
            worst[op] = max(worst.get(op, 0.0), _error(op, params, rng, amp, peak, i))
    return worst


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    for op, err in sweep(count).items():
        bound = CATALOG[op].tolerance
        print(f"{op:<10} worst {err:.2e}   tolerance {bound:.0e}   ({err / bound:.0%})")
