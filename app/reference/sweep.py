"""Worst normwise error of each catalog op over a seeded sweep of random shapes and inputs: the
evidence behind each catalog op's `tolerance`. Run `python -m app.reference.sweep [N]` (N shapes per op,
default 60; a minute of CPU at most)."""

from __future__ import annotations

import sys

import numpy as np

from app.catalog_build import build_kernel
from app.kernels import CATALOG
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


def sweep(n: int = 60, seed: int = 123) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    worst: dict[str, float] = {}

    def record(op: str, params: dict, amp: float = 1.0, peak: bool = False, i: int = 0) -> None:
        worst[op] = max(worst.get(op, 0.0), _error(op, params, rng, amp, peak, i))

    for i in range(n):
        cin, cout = (int(c) for c in rng.integers(1, 1024, 2))
        s = int(rng.integers(1, 64))
        io = ("fp16", "fp32")[i % 2]
        conv = {"in_channels": cin, "out_channels": cout, "spatial": s, "io_dtype": io}
        record(
            "conv", {**conv, "bias": i % 3 == 0, "weight_dtype": ("fp16", "fp32")[i % 4 // 2]}, i=i
        )
        mm = {"in_features": cin, "out_features": cout, "tokens": s, "io_dtype": io}
        record("matmul", {**mm, "dynamic": i % 3 == 0}, i=i)
        record("scale", {"channels": cin, "spatial": s, "io_dtype": io}, i=i)
        record("identity", {"channels": cin, "spatial": s, "io_dtype": io}, i=i)
        eps = float(10 ** rng.uniform(-6, -2))
        norm = {"channels": cin + 1, "spatial": s, "variant": ("safe", "l2norm")[i % 2], "eps": eps}
        record("rmsnorm", norm, amp=float(10 ** rng.uniform(-2, 2)), peak=i % 3 == 0, i=i)
        heads, dim, seq = (
            int(rng.integers(1, 5)),
            int(rng.choice([4, 16, 64, 128])),
            int(rng.integers(1, 64)),
        )
        attn = {"n_heads": heads, "head_dim": dim, "seq_len": seq, "causal": i % 2 == 0}
        record("sdpa", {**attn, "kv_seq_len": seq + int(rng.integers(0, 64))}, i=i)
    return worst


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    for op, err in sweep(count).items():
        bound = CATALOG[op].tolerance
        print(f"{op:<10} worst {err:.2e}   tolerance {bound:.0e}   ({err / bound:.0%})")
