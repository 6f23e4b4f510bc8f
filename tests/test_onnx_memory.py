"""An ONNX model with external data is imported in about its fp16 weights' memory: initializers
are read by offset into fp16, a chunk at a time, never through a whole onnx.load (which would
hold the float32 weights, then the fp16 copy). Measured in a process of its own: the growth of
its peak RSS over the import, against the model's fp16 weights."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

LAYERS, D = 8, 2048  # 8 fp32 matrices of 2048² (128 MiB on disk), 64 MiB in fp16
FP16_BYTES = LAYERS * D * D * 2

_MEASURE = """
import resource, sys
from app.cli import main
import app.artifacts, app.onnx.importer, app.packaging  # imported before the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
assert main(["onnx", sys.argv[1], "-o", sys.argv[2], "--format", "mlpackage"]) == 0
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base)
"""


@pytest.mark.slow
def test_peak_memory_is_within_one_and_a_half_times_the_fp16_weights(tmp_path):
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        w = np.full((D, D), 0.01 * (i + 1), np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]))
        x = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, D])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "big.onnx"
    onnx.save(model, path, save_as_external_data=True, location="big.onnx.data")
    del model, graph, inits
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), str(tmp_path / "big.zip")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    growth = int(done.stdout.strip().splitlines()[-1])
    assert growth <= 1.5 * FP16_BYTES, f"{growth / FP16_BYTES:.2f}x the fp16 weights"
