"""Quantized weights, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_quantize [--rounds 3]

For one 4096×4096 weight (a conv of 4096 channels, S = 16) and each quantize mode:

- bytes the compressed weight stores against its fp16 bytes;
- the quantization alone (app.quantize on the array);
- the error it puts in the output against the same conv with the fp16 weight,
  max|y_q − y_fp16| / max|y_fp16| over random standard-normal inputs (float64 matmuls);
- the whole build of the quantized, zipped .mlpackage from the un-quantized weight (what a request
  costs) against coremltools.optimize.coreml applied to the fp16 .mlpackage of the same conv
  (load without compiling, the optimize call, save), alternating, medians of the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

N, S = 4096, 16
PARAMS = {"in_channels": N, "out_channels": N, "spatial": S}
# (our config, coremltools.optimize's function, its config class, that config's arguments)
MODES: list[tuple[dict[str, Any], str, str, dict[str, Any]]] = [
    (
        {"mode": "palettize", "nbits": 4},
        "palettize_weights",
        "OpPalettizerConfig",
        {"mode": "kmeans", "nbits": 4},
    ),
    (
        {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 16},
        "palettize_weights",
        "OpPalettizerConfig",
        {"mode": "kmeans", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 16},
    ),
    (
        {"mode": "linear", "dtype": "int8"},
        "linear_quantize_weights",
        "OpLinearQuantizerConfig",
        {"dtype": "int8"},
    ),
    (
        {"mode": "linear", "dtype": "int4", "granularity": "per_block", "block_size": 32},
        "linear_quantize_weights",
        "OpLinearQuantizerConfig",
        {"dtype": "int4", "granularity": "per_block", "block_size": 32},
    ),
    (
        {"mode": "prune", "target_sparsity": 0.5},
        "prune_weights",
        "OpMagnitudePrunerConfig",
        {"target_sparsity": 0.5},
    ),
]


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _describe(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items() if k != "mode") or "defaults"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct
        from coremltools.optimize import coreml as cto

    from app.artifacts import kernel_zip
    from app.quantize import parse_config
    from app.quantize.compress import quantize

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, N)) * N**-0.5).astype(np.float32)
    w16 = w.astype(np.float16)
    x = rng.standard_normal((N, S))
    y16 = w16.astype(np.float64) @ x
    scale = np.abs(y16).max()
    fp16_bytes = w16.nbytes

    work = Path(tempfile.mkdtemp(prefix="bench-quantize-", dir=Path.cwd()))
    try:
        with zipfile.ZipFile(io.BytesIO(kernel_zip("conv", PARAMS, {"weight": w}))) as zf:
            zf.extractall(work / "fp16")
        package = str(work / "fp16" / "conv.mlpackage")

        rows: list[tuple[dict[str, Any], int, float, float, float, float]] = []
        for ours_config, fn_name, config_name, ct_kwargs in MODES:
            config = parse_config(ours_config)
            compressed = quantize(w16, config, "ios18")
            dense = compressed.decompressed.astype(np.float64)
            error = float(np.abs(dense @ x - y16).max() / scale)
            optimize = getattr(cto, fn_name)
            ct_config = cto.OptimizationConfig(
                global_config=getattr(cto, config_name)(weight_threshold=0, **ct_kwargs)
            )

            def coremltools_path(optimize=optimize, ct_config=ct_config) -> None:
                model = ct.models.MLModel(package, skip_model_load=True)
                with contextlib.redirect_stderr(io.StringIO()):
                    optimized = optimize(model, ct_config)
                out = work / "ct.mlpackage"
                optimized.save(str(out))
                shutil.rmtree(out)

            quant_s: list[float] = []
            ours_s: list[float] = []
            theirs_s: list[float] = []
            for _ in range(args.rounds):
                quant_s.append(_seconds(lambda config=config: quantize(w16, config, "ios18")))
                ours_s.append(
                    _seconds(
                        lambda c=ours_config: kernel_zip("conv", PARAMS, {"weight": w}, quantize=c)
                    )
                )
                theirs_s.append(_seconds(coremltools_path))
            rows.append(
                (
                    ours_config,
                    compressed.nbytes,
                    statistics.median(quant_s),
                    error,
                    statistics.median(ours_s),
                    statistics.median(theirs_s),
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"4096×4096 weight ({fp16_bytes >> 20} MiB fp16), conv S={S}, ios18, "
        f"median of {args.rounds} alternating rounds"
    )
    print(
        "| mode | config | bytes | vs fp16 | quantize s | output error vs fp16 weights "
        "| build s (ours) | coremltools.optimize s | coremltools / ours |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for given, nbytes, quant, error, ours, theirs in rows:
        print(
            f"| {given['mode']} | {_describe(given)} | {nbytes:,} | {nbytes / fp16_bytes:.3f} "
            f"| {quant:.2f} | {error:.2e} | {ours:.2f} | {theirs:.2f} | "
            f"{theirs / ours:.2f} |"
        )


if __name__ == "__main__":
    main()
