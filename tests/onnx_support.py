"""Small ONNX models written with onnx.helper, imported and verified against onnxruntime.

`Case` is one graph: its nodes, float inputs (name -> shape), constants (initializers) and
opset; `check` imports it (app/onnx) and verifies it as the builder does, which runs the program with the
reference executor and the model with onnxruntime on the same seeded inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.language.targets import get_target
from app.onnx.build import OnnxBuild
from app.onnx.files import ModelFiles
from app.onnx.importer import import_onnx
from app.reference.verify import verify_build
from app.request import OnnxParams


@dataclass
class Case:
    name: str
    nodes: list[onnx.NodeProto]
    inputs: dict[str, list[Any]]  # name -> shape (dims or symbolic names)
    outputs: list[str] = field(default_factory=lambda: ["y"])
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 17
    input_types: dict[str, int] = field(default_factory=dict)  # default FLOAT
    shapes: dict[str, list[int]] = field(default_factory=dict)  # --shape
    output_types: dict[str, int] = field(default_factory=dict)  # default FLOAT


def op(
    op_type: str, inputs: list[str], outputs: list[str] | None = None, **attrs
) -> onnx.NodeProto:
    outputs = outputs or ["y"]
    return helper.make_node(op_type, inputs, outputs, name=f"/{op_type}_{outputs[0]}", **attrs)


def one(
    name: str, op_type: str, inputs: dict[str, list[Any]], consts=None, opset=17, args=None, **attrs
) -> Case:
    """A graph of one node reading the inputs then the constants (or `args` in that order)."""
    consts = consts or {}
    names = args if args is not None else [*inputs, *consts]
    return Case(name, [op(op_type, names, **attrs)], inputs, consts=consts, opset=opset)


def model_of(case: Case) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info(n, case.input_types.get(n, TensorProto.FLOAT), shape)
        for n, shape in case.inputs.items()
    ]
    outputs = [
        helper.make_tensor_value_info(o, case.output_types.get(o, TensorProto.FLOAT), None)
        for o in case.outputs
    ]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in case.consts.items()]
    graph = helper.make_graph(case.nodes, case.name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8  # what onnxruntime reads for every opset used here
    return model


def save(case: Case, folder: Path) -> Path:
    path = folder / f"{case.name}.onnx"
    onnx.save(model_of(case), path)
    return path


def check(case: Case, folder: Path, io_dtype: str = "fp16") -> dict[str, Any]:
    """verification.json of the imported case (raises what the importer raises)."""
    path = save(case, folder)
    params = OnnxParams(model=path.name, shapes=case.shapes, io_dtype=io_dtype)
    build = import_onnx(params, ModelFiles.in_folder(path), target=get_target("ios18"), name="case")
    return verify_onnx(build)


def verify_onnx(build: OnnxBuild) -> dict[str, Any]:
    """verification.json of an import, as the artifact builder writes it."""
    return build.verify(verify_build)


def run_all(cases: list[Case], folder: Path) -> None:
    """Every case imported and verified; a failure lists every failing case."""
    failed = {}
    for case in cases:
        try:
            report = check(case, folder)
        except Exception as exc:
            failed[case.name] = f"{type(exc).__name__}: {exc}"
            continue
        if not report["passed"]:
            failed[case.name] = report["outputs"]
    assert not failed, failed


def rng_array(shape, seed=1, scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
