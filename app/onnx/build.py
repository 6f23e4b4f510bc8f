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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.kernels import ProgramBuild
from app.kernels.op import Arrays
from app.mil import ops
from app.mil.ops.common import U
from app.onnx.files import ModelFiles
from app.onnx.params import ONNX_OP
from app.onnx.runtime import OnnxIO, onnxruntime_version, run_original


@dataclass(frozen=True)
class OnnxBuild(ProgramBuild):
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
        """The model's outputs on these inputs, by onnxruntime (float32): with its quantized
        weights as the program decompresses them, or (`original`) as the model holds them."""
        assert self.files is not None
        overrides = {} if original else {key: q.decompressed for key, q in self.quantized.items()}
        return run_original(self.files, self.inputs, self.outputs, inputs, overrides), {}

    def verification_notes(self, drawn: dict[str, np.ndarray], seed: int) -> dict[str, str]:
        """Integer inputs that index a table (an embedding's ids) drawn uniform over its rows,
        other integers 0 or 1 (masks, token types); floats stay standard normal."""
        rng = np.random.default_rng(seed)
        notes = {}
        for var, io in zip(self.program.main.inputs, self.inputs, strict=True):
            if var.tensor.dtype.is_float:
                continue
            high = io.id_range or 2
            drawn[io.name] = rng.integers(0, high, var.tensor.shape).astype(var.tensor.dtype.numpy)
            notes[io.name] = f"uniform integers in [0, {high})" + (
                " (the rows of the table it indexes)" if io.id_range else ""
            )
        return notes

    def verify(self, check: Callable[[ProgramBuild], dict[str, Any]]) -> dict[str, Any]:
        """The program against onnxruntime running the original model (`exact`), each input and
        output also under its name in the model."""
        report = check(self)
        report["method"] = (
            "the program executed with fp16 storage semantics (every op rounded to its declared "
            f"dtype, weights read back from weight.bin) against onnxruntime "
            f"{onnxruntime_version()} (CPU, float32) running the original model on the same inputs"
        )
        report["tolerance"] = (
            "each output's: the sum of its primitives' error bounds along its longest path"
        )
        for io in (*self.inputs, *self.outputs):
            section = report["inputs" if io in self.inputs else "outputs"]
            if io.name in section:
                section[io.name] = {"onnx_name": io.onnx_name, **section[io.name]}
        return report

    def describe(self) -> dict[str, Any]:
        """kernel.json's `onnx` section: the model and the names the program gives its I/O."""
        return {
            "onnx": {
                **self.about,
                "inputs": {io.onnx_name: io.name for io in self.inputs},
                "outputs": {io.onnx_name: io.name for io in self.outputs},
            }
        }


@dataclass(frozen=True)
class OnnxFunctionsBuild(OnnxBuild):
    """Several sizes of one input axis as one package: a function per size (`parts`, each an
    import of its own), side by side in one program as kits put theirs, the first the default.
    The functions hold the same weights, which weight.bin stores once (app/kernels/functions.py
    merges them). Graph passes run on each function's build, and each is verified on its own."""

    parts: dict[str, OnnxBuild] = field(default_factory=dict)

    @classmethod
    def of(cls, params: Any, parts: dict[str, OnnxBuild]) -> OnnxFunctionsBuild:
        from app.kernels.functions import merge_functions

        first = next(iter(parts.values()))
        # an OnnxBuild holds what merge_functions reads of a KernelBuild (program, weights)
        program = merge_functions(parts)  # type: ignore[arg-type]
        return cls(
            params=params,
            target=first.target,
            name=first.name,
            program=program,
            weights=first.weights,
            quantized=first.quantized,
            passes=first.passes,
            files=first.files,
            inputs=first.inputs,
            outputs=first.outputs,
            consts=first.consts,
            origin=first.origin,
            about=first.about,
            parts=parts,
        )

    def through(self, pipeline: Any) -> OnnxFunctionsBuild:
        if pipeline is None:
            return self
        return OnnxFunctionsBuild.of(
            self.params, {name: part.through(pipeline) for name, part in self.parts.items()}
        )

    @property
    def function_builds(self) -> tuple[OnnxBuild, ...]:
        return tuple(self.parts.values())

    def tolerance(self, output: str) -> float:
        return next(iter(self.parts.values())).tolerance(output)

    def signature(self) -> dict[str, Any]:
        from app.kernels.catalog import function_io

        return {name: function_io(part.program.main) for name, part in self.parts.items()}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "functions": self.signature(),
            "default_function": self.program.default,
        }

    def verify(self, check: Callable[[ProgramBuild], dict[str, Any]]) -> dict[str, Any]:
        """Each function verified on its own against onnxruntime, passed when all pass."""
        reports = {name: part.verify(check) for name, part in self.parts.items()}
        return {
            "op": self.op_name,
            "name": self.name,
            "functions": reports,
            "default_function": self.program.default,
            "passed": all(r["passed"] for r in reports.values()),
        }
