"""Quantized model kits against the fp16 kit: wall time and peak RSS side by side, in one run.

Two random bf16 checkpoints written by the benchmark (bench_kit_scale's writer; deleted after):
Qwen3-0.6B-shaped (28 layers, hidden 1024, intermediate 3072, 16 heads / 8 KV heads of 128,
q/k norms, vocabulary 151,936, tied; 1.19 GB) and Llama-3.2-1B-shaped (bench_kit_scale's
config; 2.47 GB). Each is built with `ane-kernels model CKPT -o KIT --format mlmodelc --context
256 --device DEVICE [--quantize Q]`, each build a child process of its own, the page cache warm:

- fp16 (--device a18-pro), the baseline, built first and again last (the ratios divide by the
  mean of the two: the load of a shared machine drifts over a run);
- 4-bit palettes, per tensor and per 32 output channels (a18-pro): goal ≤ 2× fp16's time and
  ≤ 1.5× its peak RSS; per 32 channels with one clustering thread (`pal4g32`) and with two
  (`pal4g32x2`: ANE_PALETTE_WORKERS=2, the second core; unset, a kit takes a thread per core);
- linear int8 per channel on a16 (the one chip docs/quantization.md has a working int8 report
  for, W8 per channel on Core ML; every chip's reports list the ios18 form a kit holds,
  constexpr_blockwise_shift_scale, as failing: the planner warns), linear int4 per channel and
  50 % magnitude pruning (a18-pro): the same goals;
- 8-bit palettes and 4-bit palettes per 8 channels (a18-pro): measured, no goal.

Peak RSS is the child's `ru_maxrss` (the whole process: interpreter and imports included); CPU
seconds its user + system time, which a shared machine's load disturbs less than the wall time.

Run: `python -m bench.bench_kit_quantized` (both shapes, ~10 GB of disk under $TMPDIR at the
peak, tens of minutes on two cores), `--shapes qwen3` for one, `--runs fp16,pal4` for some.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from bench.bench_kit_scale import CONFIG as LLAMA_1B
from bench.bench_kit_scale import write_checkpoint

QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
SHAPES = {"qwen3": ("Qwen3-0.6B-shaped", QWEN3_06B), "llama": ("Llama-3.2-1B-shaped", LLAMA_1B)}
PALETTE = {"mode": "palettize", "nbits": 4}
GROUPED = {"granularity": "per_grouped_channel", "group_size": 32}
# name -> (label, device, quantize, goal)
RUNS: dict[str, tuple[str, str, dict | None, bool]] = {
    "fp16": ("fp16", "a18-pro", None, False),
    "pal4": ("4-bit palettes, per tensor", "a18-pro", PALETTE, True),
    "pal4g32": (
        "4-bit palettes, per 32 channels, one clustering thread",
        "a18-pro",
        PALETTE | GROUPED,
        True,
    ),
    "pal4g32x2": (
        "4-bit palettes, per 32 channels, two clustering threads",
        "a18-pro",
        PALETTE | GROUPED,
        True,
    ),
    "int8": ("linear int8, per channel", "a16", {"mode": "linear", "dtype": "int8"}, True),
    "int4": ("linear int4, per channel", "a18-pro", {"mode": "linear", "dtype": "int4"}, True),
    "prune": ("pruned 50 %", "a18-pro", {"mode": "prune", "target_sparsity": 0.5}, True),
    "pal8": ("8-bit palettes, per tensor", "a18-pro", {"mode": "palettize", "nbits": 8}, False),
    "pal4g8": (
        "4-bit palettes, per 8 channels",
        "a18-pro",
        PALETTE | GROUPED | {"group_size": 8},
        False,
    ),
}
# runs with settings of their own (the rest run with the environment as it is)
SETTINGS = {"pal4g32": {"ANE_PALETTE_WORKERS": "1"}, "pal4g32x2": {"ANE_PALETTE_WORKERS": "2"}}
GB, MiB = 1e9, 2**20
TIME_GOAL, MEMORY_GOAL = 2.0, 1.5

_KIT = r"""
import sys
from app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _child(*args: str, settings: dict[str, str] | None = None) -> tuple[float, float, int]:
    """`ane-kernels ARGS` in a fresh interpreter (with `settings` in its environment): wall
    seconds, CPU seconds (user + system) and its peak RSS in bytes."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", _KIT, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(settings or {})},
    )
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{args}: {errors.decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def _programs(kit: Path) -> str:
    with zipfile.ZipFile(kit) as zf:
        programs = json.loads(zf.read("kit.json"))["programs"]
    decoders = sum(p["role"] == "decoder" for p in programs)
    return f"{decoders} + {len(programs) - decoders}"


def run_shape(root: Path, shape: str, runs: list[str]) -> list[tuple]:
    """Each run's (name, seconds, CPU seconds, peak, kit bytes, programs) on one checkpoint."""
    label, config = SHAPES[shape]
    checkpoint = root / label
    started = time.perf_counter()
    data = write_checkpoint(checkpoint, config)
    print(f"{label}: {data / GB:.2f} GB written in {time.perf_counter() - started:.0f} s")
    with open(checkpoint / "model.safetensors", "rb") as f:  # page cache warm for everyone
        while f.read(64 << 20):
            pass
    rows = []
    # fp16 first and again last: the machine's load drifts over a run of minutes, and the ratios
    # take the mean of the two
    order = [*runs, "fp16"] if "fp16" in runs and len(runs) > 1 else runs
    for name in order:
        _, device, quantize, _ = RUNS[name]
        kit = root / f"{name}.kit.zip"
        args = ["model", str(checkpoint), "-o", str(kit), "--format", "mlmodelc"]
        args += ["--context", "256", "--device", device]
        if quantize is not None:
            args += ["--quantize", json.dumps(quantize)]
        seconds, cpu, peak = _child(*args, settings=SETTINGS.get(name))
        rows.append((name, seconds, cpu, peak, kit.stat().st_size, _programs(kit)))
        print(f"  {name}: {seconds:.1f} s ({cpu:.1f} s CPU), {peak / MiB:.0f} MiB", flush=True)
        kit.unlink()
    for path in checkpoint.iterdir():
        path.unlink()
    checkpoint.rmdir()
    return rows


def table(shape: str, rows: list[tuple]) -> str:
    label, _ = SHAPES[shape]
    fp16 = [row[1:4] for row in rows if row[0] == "fp16"]
    base = [sum(column) / len(fp16) for column in zip(*fp16, strict=True)] if fp16 else None
    lines = [
        f"{label}:\n",
        "| kit | device | seconds | ÷ fp16 (goal ≤ 2×) | CPU s | ÷ fp16 | peak RSS "
        "| ÷ fp16 (goal ≤ 1.5×) | kit | programs (decoder + head) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, seconds, cpu, peak, size, programs in rows:
        what, device, _, goal = RUNS[name]
        time_ratio = cpu_ratio = mem_ratio = ""
        if base is not None and name != "fp16":
            t, c, m = seconds / base[0], cpu / base[1], peak / base[2]
            time_ratio = f"{t:.2f}×" + (f" {'✓' if t <= TIME_GOAL else '✗'}" if goal else "")
            cpu_ratio = f"{c:.2f}×"
            mem_ratio = f"{m:.2f}×" + (f" {'✓' if m <= MEMORY_GOAL else '✗'}" if goal else "")
        lines.append(
            f"| {what} | {device} | {seconds:.1f} | {time_ratio} | {cpu:.1f} | {cpu_ratio} | "
            f"{peak / MiB:.0f} MiB | {mem_ratio} | {size / GB:.2f} GB | {programs} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="qwen3,llama", help="qwen3, llama or both")
    parser.add_argument("--runs", default=",".join(RUNS), help=", ".join(RUNS))
    args = parser.parse_args()
    shapes, runs = args.shapes.split(","), args.runs.split(",")
    unknown = [s for s in shapes if s not in SHAPES] + [r for r in runs if r not in RUNS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    tables = []
    with tempfile.TemporaryDirectory(prefix="bench-kitq-") as tmp:
        for shape in shapes:
            tables.append(table(shape, run_shape(Path(tmp), shape, runs)))
    print("\n" + "\n\n".join(tables))


if __name__ == "__main__":
    main()
