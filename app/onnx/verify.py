"""verification.json of an ONNX import: onnxruntime (CPU, float32) runs the original model and the
reference executor runs the built program (fp16 storage, weights read back from weight.bin), on
the same seeded inputs; each output's error against its tolerance (app/onnx/build.py).

Inputs: floats standard normal (rounded to the program's input dtype, and given to onnxruntime
as those same values), integers that index a table (an embedding's ids) uniform over its rows,
other integers 0 or 1 (masks, token types).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.errors import RequestError
from app.onnx.build import OnnxBuild
from app.reference.executor import Executor
from app.reference.verify import MAX_VERIFY_ELEMENTS, compare

SEED = 0


def draw(build: OnnxBuild, seed: int = SEED) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(the program's inputs by name, how each was drawn)."""
    rng = np.random.default_rng(seed)
    inputs, notes = {}, {}
    for var, io in zip(build.program.main.inputs, build.inputs, strict=True):
        t = var.tensor
        if t.dtype.is_float:
            inputs[io.name] = rng.standard_normal(t.shape).astype(t.dtype.numpy)
            notes[io.name] = "standard normal, stored in the input's dtype"
        else:
            high = io.id_range or 2
            inputs[io.name] = rng.integers(0, high, t.shape).astype(t.dtype.numpy)
            notes[io.name] = f"uniform integers in [0, {high})" + (
                " (the rows of the table it indexes)" if io.id_range else ""
            )
    return inputs, notes


def verify_onnx(build: OnnxBuild, seed: int = SEED) -> dict[str, Any]:
    import onnxruntime as ort

    fn = build.program.main
    largest = max(
        [v.tensor.size for v in fn.inputs]
        + [v.tensor.size for op in fn.operations for v in op.outputs]
    )
    if largest > MAX_VERIFY_ELEMENTS:
        raise RequestError(
            "verify",
            f"a tensor of {largest} elements; verification runs up to {MAX_VERIFY_ELEMENTS}",
        )
    inputs, notes = draw(build, seed)
    result = Executor.from_written_weights(build.program).run(inputs)
    exact, _ = build.exact(inputs, {})
    outputs = {
        io.name: {
            "onnx_name": io.onnx_name,
            **compare(result.outputs[io.name], exact[io.name], build.tolerance(io.name)),
        }
        for io in build.outputs
    }
    return {
        "op": build.op_name,
        "name": build.name,
        "target": build.target.name,
        "method": (
            f"the program executed with fp16 storage semantics (every op rounded to its declared "
            f"dtype, weights read back from weight.bin) against onnxruntime {ort.__version__} "
            "(CPU, float32) running the original model on the same inputs"
        ),
        "error_measure": "max_rel_error = max|program - onnxruntime| / max|onnxruntime|, per output",
        "tolerance": "each output's: the sum of its primitives' error bounds along its longest path",
        "seed": seed,
        "inputs": {
            io.name: {
                "onnx_name": io.onnx_name,
                "shape": list(io.shape),
                "dtype": fn.inputs[i].tensor.dtype.value,
                "distribution": notes[io.name],
            }
            for i, io in enumerate(build.inputs)
        },
        "outputs": outputs,
        "states": {},
        "fp16_overflow": result.overflowed,
        "nan": result.produced_nan,
        "anomalies": [a.to_json() for a in result.anomalies],
        "passed": all(o["passed"] for o in outputs.values()),
    }
