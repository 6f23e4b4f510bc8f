"""Several sizes of one axis (`--shape input_ids=1,{16,32,64}`): one package with a function per
size, as kits build theirs, the weights stored once, each function verified on its own."""

from __future__ import annotations

import json
import zipfile

import numpy as np
from onnx import TensorProto
from onnx_support import Case, op, rng_array, save

from app.cli import main
from app.cli.onnx import shapes_arg

SIZES = (16, 32, 64)


def _model(folder):
    case = Case(
        "ids",
        [
            op("Gather", ["table", "input_ids"], ["e"]),
            op("MatMul", ["e", "w"], ["h"]),
            op("Gelu", ["h"], ["y"]),
        ],
        {"input_ids": [1, "sequence"]},
        consts={"table": rng_array([100, 64]), "w": rng_array([64, 64], seed=2, scale=0.125)},
        input_types={"input_ids": TensorProto.INT64},
        opset=20,
    )
    return save(case, folder)


def test_one_function_per_size_sharing_the_weights(tmp_path):
    out = tmp_path / "ids.zip"
    shape = "input_ids=1,{" + ",".join(map(str, SIZES)) + "}"
    argv = ["onnx", str(_model(tmp_path)), "-o", str(out), "--shape", shape]
    assert main([*argv, "--format", "mil", "--verify"]) == 0
    with zipfile.ZipFile(out) as zf:
        kernel = json.loads(zf.read("kernel.json"))
        report = json.loads(zf.read("verification.json"))
        mil = zf.read("model.mil").decode()
        blob = zf.getinfo("weights/weight.bin").file_size
    names = [f"length_{n}" for n in SIZES]
    assert list(kernel["functions"]) == names and kernel["default_function"] == names[0]
    for n, name in zip(SIZES, names, strict=True):
        assert kernel["functions"][name]["inputs"][0]["shape"] == [1, n]
        assert f"func {name}<ios18>(tensor<int32, [1, {n}]> input_ids)" in mil
        assert report["functions"][name]["passed"]
    assert report["passed"]
    weights = (100 * 64 + 64 * 64) * 2  # fp16, once
    assert weights <= blob < weights + 4096


def test_the_braces_and_their_refusals(tmp_path):
    assert shapes_arg(["a=1,{64,128},8"]) == {"a": [1, [64, 128], 8]}
    model = str(_model(tmp_path))
    for shape, target in (("input_ids=1,{16,32}", "ios17"), ("input_ids={1,2},{16,32}", "ios18")):
        out = tmp_path / "no.zip"
        argv = ["onnx", model, "-o", str(out), "--shape", shape, "--target", target]
        assert main([*argv, "--format", "mil"]) == 2
        assert not out.exists()


def test_the_default_function_runs(tmp_path):
    out = tmp_path / "ids.zip"
    argv = ["onnx", str(_model(tmp_path)), "-o", str(out), "--shape", "input_ids=1,{16,32}"]
    assert main([*argv, "--format", "mil"]) == 0
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(16, dtype=np.int64).reshape(1, 16))
    run = ["run", str(out), "--input", f"input_ids={ids}", "--output-dir", str(tmp_path / "o")]
    assert main(run) == 0
    assert np.load(tmp_path / "o" / "y.npy").shape == (1, 16, 64)
