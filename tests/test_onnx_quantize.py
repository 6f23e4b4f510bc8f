"""`--quantize` on an ONNX import: the model's weight matrices compressed as a kernel's are,
verified against onnxruntime twice (with the weights as decompressed: the fp16 error; as the
model holds them: what quantizing cost), and a config a weight cannot take refused naming it."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from app.cli import main

VIT = Path(__file__).resolve().parent / "fixtures" / "onnx" / "vit.onnx"


def test_linear_int8_compresses_the_weight_matrices(tmp_path):
    out = tmp_path / "vit-int8.zip"
    argv = ["onnx", str(VIT), "-o", str(out), "--format", "mil", "--verify"]
    assert main([*argv, "--quantize", '{"mode": "linear", "dtype": "int8"}']) == 0
    with zipfile.ZipFile(out) as zf:
        kernel = json.loads(zf.read("kernel.json"))
        report = json.loads(zf.read("verification.json"))
        mil = zf.read("model.mil").decode()
    quantized = {k: w["quantized"] for k, w in kernel["weights"].items() if "quantized" in w}
    assert "model.embeddings.patch_embeddings.projection.weight" in quantized  # the Conv's
    assert len(quantized) >= 12 and all(q["dtype"] == "int8" for q in quantized.values())
    assert mil.count("constexpr_blockwise_shift_scale(") == len(quantized)
    assert report["passed"] and report["quantization"]["passed"]
    assert 0 < report["quantization"]["max_rel_error"] < 0.05


def test_a_config_a_weight_cannot_take_is_refused_naming_it(tmp_path, capsys):
    config = '{"mode": "linear", "dtype": "int8", "granularity": "per_block", "block_size": 7}'
    out = tmp_path / "bad.zip"
    assert main(["onnx", str(VIT), "-o", str(out), "--format", "mil", "--quantize", config]) == 2
    err = capsys.readouterr().err
    assert "quantize.block_size" in err and "patch_embeddings.projection.weight" in err
    assert not out.exists()


def test_a_quantization_error_over_the_limit_is_refused(tmp_path, capsys):
    out = tmp_path / "p4.zip"
    argv = ["onnx", str(VIT), "-o", str(out), "--format", "mil", "--verify"]
    limited = [
        "--quantize",
        '{"mode": "palettize", "nbits": 4}',
        "--max-quantization-error",
        "0.001",
    ]
    assert main([*argv, *limited]) == 2
    assert "max_quantization_error" in capsys.readouterr().err
    assert not out.exists()
