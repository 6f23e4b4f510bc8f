"""An ONNX import as built: the program, its weights, and what maps it back to the model (names,
nodes) for kernel.json, the preflight's findings and verification.

Tolerance of an output: the sum of the primitives' error bounds (their records, app/mil/ops: 0 for
data movement, 2u for one rounding, 4u for a transcendental or an accumulation; u = 2⁻¹¹) along
the longest path that reaches it, each op adding its own bound to the largest its inputs carry;
a float constant carries one rounding (the model's float32 values stored in fp16); capped at 1.
Graphs (app/graphs/built.py) also add up the bounds of a product's two operands; along the
dozens of products of a transformer layer that doubling reaches the cap, so an import holds
each output to the path sum instead: first-order, and what the fp16 rounding of each step adds
when errors do not amplify (verification says so when they do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.kernels import KernelBuild
from app.kernels.op import Arrays
from app.mil import ops
from app.mil.ops.common import U
from app.onnx.files import ModelFiles
from app.onnx.runtime import OnnxIO, run_original
from app.request import ONNX_OP


@dataclass(frozen=True)
class OnnxBuild(KernelBuild):
    files: ModelFiles | None = None
    inputs: tuple[OnnxIO, ...] = ()
    outputs: tuple[OnnxIO, ...] = ()
    consts: dict[str, str] = field(default_factory=dict)  # weight key -> its const op
    origin: dict[str, str] = field(default_factory=dict)  # program op -> ONNX node
    about: dict[str, Any] = field(default_factory=dict)  # the model: opset, producer, ...

    @property
    def op_name(self) -> str:
        return ONNX_OP

    def const_name(self, weight: str) -> str:
        return self.consts[weight]

    def where(self, name: str) -> str:
        if name in self.origin:
            return f"nodes.{self.origin[name]}"
        for io in (*self.inputs, *self.outputs):
            if io.name == name:
                kind = "inputs" if io in self.inputs else "outputs"
                return f"{kind}.{io.onnx_name}"
        return "model"

    def tolerance(self, output: str) -> float:
        bound: dict[str, float] = {v.name: 0.0 for v in self.program.main.inputs}
        for op in self.program.main.operations:
            carried = [
                bound.get(var.name, 0.0)
                for value in op.inputs.values()
                for var in (value if isinstance(value, tuple) else (value,))
            ]
            record = ops.get(op.type)
            own = record.graph.error_bound if record is not None and record.graph else 0.0
            if op.type == "const" and op.outputs[0].tensor.dtype.is_float:
                own = U  # the model's float32 constant, rounded once to fp16
            for var in op.outputs:
                bound[var.name] = min(1.0, max(carried, default=0.0) + own)
        return float(f"{bound[output]:.3g}")

    def exact(self, inputs: Arrays, states: Arrays, *, original: bool = False) -> tuple[dict, dict]:
        """The original model's outputs on these inputs, by onnxruntime (float32)."""
        assert self.files is not None
        return run_original(self.files, self.inputs, self.outputs, inputs), {}

    def description(self) -> dict[str, Any]:
        """kernel.json's `onnx` section: the model and the names the program gives its I/O."""
        return {
            "onnx": {
                **self.about,
                "inputs": {io.onnx_name: io.name for io in self.inputs},
                "outputs": {io.onnx_name: io.name for io in self.outputs},
            }
        }
