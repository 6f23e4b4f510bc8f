"""A model kit at the scale of Llama-3.2-1B (16 layers, hidden 2048, intermediate 8192, 32 heads /
8 KV heads of 64, vocabulary 128,256, tied embeddings; random bf16 weights, 2.47 GB, written by
the benchmark into a temporary folder and deleted after), side by side in one run, each in a
child process of its own:

(a) the floor: plain NumPy reading the same tensor bytes, bf16 -> fp16 (through float32, a few
    million values at a time), written to one file;
(b) `ane-kernels model CKPT -o KIT.zip --format mlmodelc`: a complete compiled kit, not verified;
(c) the same with `--verify` (the kit run from its zip against the float64 model).

Each: wall seconds and the ratio to (a) (goal ≤ 1.5×), and the child's peak RSS (wait4's
ru_maxrss, the whole process: interpreter and imports included) against the largest program's
weights in the kit (goal ≤ 1.5×).

Run: `python -m bench.bench_kit_scale` (about 12 GB of disk under $TMPDIR at the peak, several
minutes on two cores).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

LAYERS, HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 16, 2048, 8192, 32, 8, 64
VOCAB = 128256
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": HEAD_DIM,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": INTERMEDIATE,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "num_attention_heads": HEADS,
    "num_hidden_layers": LAYERS,
    "num_key_value_heads": KV_HEADS,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": VOCAB,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
GB, MiB = 1e9, 2**20
POOL = 1 << 24  # random bf16 values drawn once and cycled through (drawing 1.2 G is minutes)


def _shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a tied Llama or Qwen3 checkpoint of `config`'s shape (Qwen3: per-head q/k
    norms and an explicit head_dim)."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    layer = {
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (heads * head_dim, hidden),
        "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
    }
    if config["model_type"] == "qwen3":
        layer |= {"self_attn.q_norm.weight": (head_dim,), "self_attn.k_norm.weight": (head_dim,)}
    shapes = {"model.embed_tokens.weight": (config["vocab_size"], hidden)}
    for i in range(config["num_hidden_layers"]):
        shapes |= {f"model.layers.{i}.{n}": s for n, s in layer.items()}
    return shapes | {"model.norm.weight": (hidden,)}


def write_checkpoint(folder: Path, config: dict = CONFIG) -> int:
    """config.json and model.safetensors (bf16, random: N(0, 1/hidden) for matrices, 1 ± 0.1
    for norms); the bytes of tensor data written."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    shapes = _shapes(config)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2 * int(np.prod(shape))
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(0)
    pool = rng.standard_normal(POOL, dtype=np.float32) * np.float32(config["hidden_size"] ** -0.5)
    pool_bits = (pool.view(np.uint32) >> 16).astype(np.uint16)
    gains = ((1 + 0.1 * pool).view(np.uint32) >> 16).astype(np.uint16)
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for shape in shapes.values():
            if len(shape) == 1:
                f.write(gains[: shape[0]].tobytes())
                continue
            size, start = int(np.prod(shape)), int(rng.integers(0, POOL))
            for done in range(0, size, POOL):
                count = min(POOL, size - done)
                f.write(np.roll(pool_bits, start + done)[:count].tobytes())
    return offset


# -- (a) the floor: plain NumPy ------------------------------------------------------------------

_BASELINE = r"""
import json, struct, sys
import numpy as np
source, target = sys.argv[1], sys.argv[2]
CHUNK = 1 << 22
with open(source, "rb") as f:
    (length,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(length))
    start = 8 + length
    with open(target, "wb") as out:
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            f.seek(start + begin)
            for left in range((end - begin) // 2, 0, -CHUNK):
                bits = np.frombuffer(f.read(2 * min(CHUNK, left)), np.uint16)
                wide = (bits.astype(np.uint32) << 16).view(np.float32)
                out.write(wide.astype(np.float16).tobytes())
"""

_KIT = r"""
import sys
from app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _child(code: str, *args: str) -> tuple[float, int]:
    """Run `code` in a fresh interpreter: wall seconds and its peak RSS in bytes."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):  # 1: built, but the verification did not pass
        raise RuntimeError(f"{args}: exit {child.returncode}")
    return seconds, usage.ru_maxrss * 1024


def _largest_program(kit: Path) -> int:
    with zipfile.ZipFile(kit) as zf:
        meta = json.loads(zf.read("kit.json"))
    return max(p["weight_bytes"] for p in meta["programs"])


def _verified(kit: Path) -> dict | None:
    with zipfile.ZipFile(kit) as zf:
        return json.loads(zf.read("kit.json")).get("verification")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-kit-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        data = write_checkpoint(root / "Llama-3.2-1B-shaped")
        print(
            f"wrote the checkpoint ({data / GB:.2f} GB) in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        checkpoint = root / "Llama-3.2-1B-shaped"
        with open(checkpoint / "model.safetensors", "rb") as f:  # page cache warm for everyone
            while f.read(64 << 20):
                pass
        # (label, seconds, peak RSS, the largest program's bytes, the kit's verification)
        rows: list[tuple[str, float, int, int | None, dict | None]] = []
        seconds, peak = _child(
            _BASELINE, str(checkpoint / "model.safetensors"), str(root / "baseline.f16")
        )
        rows.append(("(a) NumPy: read, bf16 → fp16, write", seconds, peak, None, None))
        (root / "baseline.f16").unlink()
        print(f"(a) {seconds:.1f} s", flush=True)
        for label, extra in (
            ("(b) kit, mlmodelc", []),
            ("(c) kit, mlmodelc, --verify", ["--verify"]),
        ):
            kit = root / "model.kit.zip"
            seconds, peak = _child(
                _KIT, "model", str(checkpoint), "-o", str(kit), "--format", "mlmodelc", *extra
            )
            rows.append((label, seconds, peak, _largest_program(kit), _verified(kit)))
            print(f"{label}: {seconds:.1f} s, kit {kit.stat().st_size / GB:.2f} GB", flush=True)
            kit.unlink()
        shutil.rmtree(checkpoint)
    base = rows[0][1]
    print(f"\nLlama-3.2-1B-shaped checkpoint, bf16, {data / GB:.2f} GB of tensors\n")
    print(
        "| run | seconds | ÷ (a) (goal ≤ 1.5×) | peak RSS | largest program's weights | "
        "peak ÷ largest (goal ≤ 1.5×) |\n|---|---:|---:|---:|---:|---:|"
    )
    for label, seconds, peak, largest, verification in rows:
        ratio = "" if largest is None else f"{peak / largest:.2f}×"
        note = "" if verification is None else f" (passed: {verification['passed']})"
        print(
            f"| {label}{note} | {seconds:.1f} | {seconds / base:.2f}× | {peak / MiB:.0f} MiB | "
            f"{'' if largest is None else f'{largest / MiB:.0f} MiB'} | {ratio} |"
        )


if __name__ == "__main__":
    main()
