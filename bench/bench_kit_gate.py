"""What the quality gate and `--quantize auto` cost, at the scale of Qwen3-0.6B (28 layers,
hidden 1024, intermediate 3072, 16 heads / 8 KV heads of 128, vocabulary 151,936, tied
embeddings, q/k norms; random bf16 weights, 1.19 GB, written into a temporary folder and deleted
after), side by side in one run, each build in a child process of its own:

(a) `ane-kernels model CKPT -o KIT.zip --format mlmodelc` (fp16): the unit;
(b) the same with `--quantize '{"mode": "palettize", "nbits": 4}'`;
(c) (b) with `--verify --max-kl 0.05`: the verification and the quality gate on top;
(d) `--quantize auto --max-kl 0.05`: the ladder walked, then the kit built (goal ≤ 10× (a)).

Each: wall seconds, the ratio to (a), the child's peak RSS; (c) and (d) print what the gate
measured and what auto chose. Random weights: the numbers measure the gate's cost, not any
model's quality.

Run: `python -m bench.bench_kit_gate [--layers N] [--only ad]` (N < 28: fewer layers, the same
widths; --only: the runs by letter).
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
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 1024, 3072, 16, 8, 128, 151936


def config(layers: int) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": 40960,
        "num_attention_heads": HEADS,
        "num_hidden_layers": layers,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
    }


def shapes(layers: int) -> dict[str, tuple[int, ...]]:
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    layer = {
        "input_layernorm.weight": (HIDDEN,),
        "post_attention_layernorm.weight": (HIDDEN,),
        "self_attn.q_proj.weight": (q, HIDDEN),
        "self_attn.k_proj.weight": (kv, HIDDEN),
        "self_attn.v_proj.weight": (kv, HIDDEN),
        "self_attn.o_proj.weight": (HIDDEN, q),
        "self_attn.q_norm.weight": (HEAD_DIM,),
        "self_attn.k_norm.weight": (HEAD_DIM,),
        "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
        "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
        "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
    }
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        out |= {f"model.layers.{i}.{n}": s for n, s in layer.items()}
    return out | {"model.norm.weight": (HIDDEN,)}


def write_checkpoint(folder: Path, layers: int) -> int:
    """config.json and model.safetensors (bf16, N(0, 1/fan_in) matrices, gains near 1)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config(layers), indent=2))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes(layers).items():
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
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for shape in shapes(layers).values():
            if len(shape) == 1:
                values = 1 + 0.1 * rng.standard_normal(shape[0], dtype=np.float32)
            else:
                values = rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[1] ** -0.5)
            f.write((values.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    return offset


_KIT = "import sys\nfrom app.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def _child(*args: str) -> tuple[float, int]:
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", _KIT, *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: built, but a check did not pass
        raise RuntimeError(f"{args}: exit {code}")
    return time.perf_counter() - started, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--only", default="abcd", help="the runs to make, by letter (a first)")
    args = parser.parse_args()
    layers = args.layers
    four = json.dumps({"mode": "palettize", "nbits": 4})
    runs = [
        ("(a) fp16", []),
        ("(b) 4-bit palettes", ["--quantize", four]),
        ("(c) 4-bit, --verify --max-kl 0.05", ["--quantize", four, "--verify", "--max-kl", "0.05"]),
        ("(d) --quantize auto --max-kl 0.05", ["--quantize", "auto", "--max-kl", "0.05"]),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        root = Path(tmp)
        checkpoint = root / "Qwen3-0.6B-shaped"
        started = time.perf_counter()
        data = write_checkpoint(checkpoint, layers)
        print(
            f"{layers} layers: wrote {data / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s"
        )
        unit = None
        for label, extra in runs:
            if label[1] not in args.only:
                continue
            kit = root / "kit.zip"
            seconds, peak = _child(
                "model", str(checkpoint), "-o", str(kit), "--format", "mlmodelc", *extra
            )
            unit = unit or seconds
            print(f"{label:<38} {seconds:7.1f} s  {seconds / unit:5.2f}×  {peak / 2**30:.2f} GiB")
            with zipfile.ZipFile(kit) as zf:
                meta = json.loads(zf.read("kit.json"))
            if "quantize_auto" in meta:
                auto = meta["quantize_auto"]
                for part in ("layers", "head"):
                    tried = [(t["setting"], t["kl_mean"], t["passed"]) for t in auto[part]["tried"]]
                    print(f"    {part}: {auto[part]['chosen']}; tried {tried}")
                print(f"    choosing took {auto['seconds']} s")
            if "quality" in meta:
                q = meta["quality"]["kit_vs_checkpoint"]
                print(f"    gate vs checkpoint: {q}")
            kit.unlink()


if __name__ == "__main__":
    main()
