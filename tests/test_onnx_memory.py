"""An ONNX model with external data is imported in about its fp16 weights' memory: initializers
are read by offset into fp16, a chunk at a time, never through a whole onnx.load (which would
hold the float32 weights, then the fp16 copy), and the default passes' fusions hold no second
copy (a MatMul and its bias become a `linear` whose weight is the MatMul's transposed: a view of
the array the program as built keeps). Measured in a process of its own: the growth of its peak
RSS over the import, against the model's fp16 weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

LAYERS, D = 8, 2048  # 8 fp32 matrices of 2048² (128 MiB on disk), 64 MiB in fp16
FP16_BYTES = LAYERS * D * D * 2

# The peak is read as VmHWM, the high-water mark of this process's own memory: ru_maxrss would
# carry over the peak of the (large) test process this one is started from (Linux keeps it
# across exec), and measure nothing.
_MEASURE = """
import sys
from pathlib import Path
from app.cli import main
import app.artifacts, app.onnx.importer, app.packaging  # imported before the baseline

def peak():
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024

base = peak()
assert main(["onnx", sys.argv[1], "-o", sys.argv[2], "--format", "mlpackage"]) == 0
print(peak() - base)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_peak_memory_is_within_one_and_a_half_times_the_fp16_weights(tmp_path):
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        w = np.full((D, D), 0.01 * (i + 1), np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.full(D, 0.5, np.float32), f"b{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"p{i}"]))
        nodes.append(helper.make_node("Add", [f"p{i}", f"b{i}"], [f"h{i}"]))
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
