"""Checkpoint → programs for a 1B-class Llama stack (16 layers, hidden 2048, intermediate 8192,
32 heads, 8 KV heads; random weights written here as fp32 and bf16 safetensors, two shards each).

1. Reading: every layer's tensors memory-mapped and converted to fp16 (app/checkpoints), against
   a plain copy of the same bytes out of the same mapping, interleaved, page cache warm: GB/s of
   checkpoint bytes, and their ratio (goal: conversion ≥ 0.7× the copy).
2. The conversion alone, in memory, one 8192×2048 tensor: ours (chunked) against NumPy's cast
   and, when importable, ml_dtypes and torch (the alternatives to a hand-written path), and a
   copy of the same bytes.
3. `mil` bundles, one decoder_layer program per layer (prefill, seq_len 64), built and written
   one after the other in a fresh process: seconds, GB/s of checkpoint, and peak RSS above the
   process before the first layer (VmHWM after clear_refs) against one program's fp16 weights
   (goal ≤ 1.5×).

Run: `python -m bench.bench_checkpoint [--layers 16]` (about 6 GB of disk under $TMPDIR, a few
minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIG = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
SHAPES = {
    "input_layernorm.weight": (2048,),
    "post_attention_layernorm.weight": (2048,),
    "self_attn.q_proj.weight": (2048, 2048),
    "self_attn.k_proj.weight": (512, 2048),
    "self_attn.v_proj.weight": (512, 2048),
    "self_attn.o_proj.weight": (2048, 2048),
    "mlp.gate_proj.weight": (8192, 2048),
    "mlp.up_proj.weight": (8192, 2048),
    "mlp.down_proj.weight": (2048, 8192),
}
GB = 1e9


# -- a checkpoint, written tensor by tensor --------------------------------------------------------


def _values(rng: np.random.Generator, name: str, shape) -> np.ndarray:
    if name.endswith("layernorm.weight"):
        return (1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[1] ** -0.5)


def write_shard(path: Path, layers: range, dtype: str, seed: int) -> dict[str, str]:
    """Layers `layers` in one safetensors file, F32 or BF16 (bf16: float32 truncated)."""
    item = 4 if dtype == "F32" else 2
    header, offset = {}, 0
    for i in layers:
        for name, shape in SHAPES.items():
            size = int(np.prod(shape)) * item
            header[f"model.layers.{i}.{name}"] = {
                "dtype": dtype,
                "shape": list(shape),
                "data_offsets": [offset, offset + size],
            }
            offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _ in layers:
            for name, shape in SHAPES.items():
                values = _values(rng, name, shape)
                if dtype == "BF16":
                    values = (values.view(np.uint32) >> 16).astype(np.uint16)
                f.write(values.tobytes())
    return {n: path.name for n in header}


def write_checkpoint(folder: Path, layers: int, dtype: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, "num_hidden_layers": layers}))
    half = layers // 2
    weight_map: dict[str, str] = {}
    for k, part in enumerate((range(half), range(half, layers))):
        weight_map |= write_shard(
            folder / f"model-{k + 1:05d}-of-00002.safetensors", part, dtype, seed=k
        )
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index


# -- 1. reading: convert vs copy -------------------------------------------------------------------


def _warm(folder: Path) -> None:
    for file in folder.glob("*.safetensors"):
        with open(file, "rb") as f:
            while f.read(64 << 20):
                pass


def _copy_all(tensors) -> int:
    """The baseline: each tensor's bytes copied out of the same mapping, pages released after."""
    from app.checkpoints.convert import _release
    from app.checkpoints.files import Mapped

    done = 0
    with Mapped() as mapped:
        for t in tensors:
            mm = mapped.of(t)
            source = np.frombuffer(mm, np.uint8, t.nbytes, t.offset)
            np.copyto(np.empty(t.nbytes, np.uint8), source)
            del source
            _release(mm, t.offset, t.offset + t.nbytes)
            done += t.nbytes
    return done


def _convert_all(tensors) -> int:
    from app.checkpoints.convert import to_fp16
    from app.checkpoints.files import Mapped

    with Mapped() as mapped:
        for t in tensors:
            to_fp16(t, mapped)
    return sum(t.nbytes for t in tensors)


def reading(index: Path, reps: int = 3) -> dict:
    from app.checkpoints import open_checkpoint

    tensors = list(open_checkpoint(index).values())
    _warm(index.parent)
    best = {"copy": float("inf"), "convert": float("inf")}
    size = 0
    for _ in range(reps):
        for kind, fn in (("copy", _copy_all), ("convert", _convert_all)):
            start = time.perf_counter()
            size = fn(tensors)
            best[kind] = min(best[kind], time.perf_counter() - start)
    return {"bytes": size, **{k: size / v / GB for k, v in best.items()}}


# -- 2. the conversion alone, in memory --------------------------------------------------------------


def _timed(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def alternatives() -> list[tuple[str, str, float]]:
    """(source, method, GB/s of source bytes) for one 8192×2048 tensor already in memory."""
    from app.checkpoints.convert import CHUNK, _converter, _from_bf16, _from_float, compiled

    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((8192, 2048), dtype=np.float32) * np.float32(2048**-0.5)
    bf16 = (f32.view(np.uint32) >> 16).astype(np.uint16)
    out = np.empty(f32.shape, np.float16)
    flat_out, scratch = out.reshape(-1), np.empty(CHUNK, np.uint16)

    def chunked(step, source):
        flat = source.reshape(-1)
        for s in range(0, flat.size, CHUNK):
            step(flat[s : s + CHUNK], flat_out[s : s + CHUNK], scratch[: min(CHUNK, flat.size - s)])

    rows = []
    for label, source in (("fp32", f32), ("bf16", bf16)):
        copy = _timed(lambda source=source: np.copyto(np.empty_like(source), source))
        rows.append((label, "copy (same bytes)", source.nbytes / copy / GB))
        step = _from_float if label == "fp32" else _from_bf16
        rows.append(
            (
                label,
                "ours, NumPy path (chunked)",
                source.nbytes / _timed(lambda s=step, x=source: chunked(s, x)) / GB,
            )
        )
        if compiled():  # the path to_fp16 takes where app/checkpoints/native/_fp16 was built
            step = _converter("F32" if label == "fp32" else "BF16")
            secs = _timed(lambda s=step, x=source: chunked(s, x))
            rows.append((label, "ours, compiled F16C path (chunked)", source.nbytes / secs / GB))
        if label == "fp32":
            numpy_cast = _timed(lambda: np.copyto(out, f32, casting="unsafe"))
        else:
            numpy_cast = _timed(
                lambda: np.copyto(
                    out, (bf16.astype(np.uint32) << 16).view(np.float32), casting="unsafe"
                )
            )
        rows.append((label, "numpy cast (whole tensor)", source.nbytes / numpy_cast / GB))
        try:
            import ml_dtypes

            typed = source if label == "fp32" else source.view(ml_dtypes.bfloat16)
            secs = _timed(lambda t=typed: np.copyto(out, t, casting="unsafe"))
            rows.append((label, "ml_dtypes cast", source.nbytes / secs / GB))
        except ImportError:
            rows.append((label, "ml_dtypes cast", float("nan")))
        try:
            import torch

            torch.set_num_threads(1)
            src = torch.from_numpy(source)
            src = src if label == "fp32" else src.view(torch.bfloat16)
            dst = torch.from_numpy(out)
            secs = _timed(lambda d=dst, s=src: d.copy_(s))
            rows.append((label, "torch copy_ (1 thread)", source.nbytes / secs / GB))
        except ImportError:
            rows.append((label, "torch copy_ (1 thread)", float("nan")))
    return rows


# -- 3. mil bundles, one program per layer, in a fresh process -------------------------------------

_BUNDLES = r"""
import gc, json, sys, time
from pathlib import Path
from app import artifacts
from app.checkpoints.load import convert_all, locate, op_params
from app.checkpoints import open_checkpoint, read_config
from app.request import KernelRequest

index, out, layers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
artifacts.warm()  # imports and first-use costs, before the baseline
tensors = open_checkpoint(index)
config = read_config(index.parent / "config.json")
status = lambda key: next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))
open("/proc/self/clear_refs", "w").write("5")
base = status("VmRSS:")
start, read, weights = time.perf_counter(), 0, 0
for i in range(layers):
    _, parsed, params = op_params("decoder_layer", config, range(i, i + 1), {"seq_len": 64})
    fp16, size = convert_all(locate("decoder_layer", parsed, tensors, i))
    read += size
    weights = max(weights, sum(a.nbytes for a in fp16.values()))
    request = KernelRequest.create("decoder_layer", params, fp16, format="mil", name=f"layer{i}")
    artifacts.save(artifacts.prepare(request), out / f"layer{i}.mil.zip")
    del fp16, request
    gc.collect()  # a program's ops and vars reference each other: only the cyclic GC frees it
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "read": read, "weights": weights,
                  "peak_extra": (status("VmHWM:") - base) * 1024}))
"""


def bundles(index: Path, out: Path, layers: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", _BUNDLES, str(index), str(out), str(layers)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results = {}
        for dtype in ("F32", "BF16"):
            started = time.perf_counter()
            index = write_checkpoint(root / dtype, args.layers, dtype)
            print(f"wrote {dtype} checkpoint in {time.perf_counter() - started:.0f} s", flush=True)
            results[dtype] = (reading(index), bundles(index, root / f"out-{dtype}", args.layers))
            for shard in (root / dtype).glob("*.safetensors"):
                os.posix_fadvise(os.open(shard, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)
        print(f"\n{args.layers} layers, hidden 2048, intermediate 8192, 32 heads / 8 KV heads\n")
        print("| checkpoint | bytes | copy GB/s | convert GB/s | convert / copy | goal |")
        print("|---|---|---|---|---|---|")
        for dtype, (read, _) in results.items():
            print(
                f"| {dtype} | {read['bytes'] / GB:.2f} GB | {read['copy']:.2f} | "
                f"{read['convert']:.2f} | {read['convert'] / read['copy']:.2f}× | ≥ 0.7× |"
            )
        print("\n| source | method | GB/s (source bytes) |\n|---|---|---|")
        for source, method, speed in alternatives():
            shown = "not installed" if speed != speed else f"{speed:.2f}"  # NaN: not importable
            print(f"| {source} | {method} | {shown} |")
        print(
            "\n| checkpoint → mil bundles | seconds | GB/s of checkpoint | peak extra RSS | "
            "largest program's fp16 weights | ratio | goal |\n|---|---|---|---|---|---|---|"
        )
        for dtype, (_, built) in results.items():
            print(
                f"| {dtype}, {args.layers} × decoder_layer (S=64) | {built['seconds']:.1f} | "
                f"{built['read'] / built['seconds'] / GB:.2f} | "
                f"{built['peak_extra'] / 2**20:.0f} MiB | {built['weights'] / 2**20:.0f} MiB | "
                f"{built['peak_extra'] / built['weights']:.2f}× | ≤ 1.5× |"
            )


if __name__ == "__main__":
    main()
