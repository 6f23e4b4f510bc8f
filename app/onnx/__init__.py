"""ONNX in: an exported model (torch.onnx.export, optimum-cli export onnx) read bounded and
checked, its shape arithmetic evaluated at import, its ops lowered onto the IR's primitives into
one program, and verified against onnxruntime (docs/onnx.md).

    reader.py     the model file parsed within limits; opsets, graph, names, shapes checked
    files.py      where the model's files are; external-data locations held to its folder
    tensors.py    initializers read by offset (external data), into fp16, range-checked
    lowering.py   the driver: constants evaluated, nodes lowered, every unsupported node named
    ops_*.py      each ONNX op's lowering; patterns.py the subgraphs lowered as one op
    support.py    which ops import and which wait on a primitive
    importer.py   the model -> one program (names, input shapes, dtypes)
    params.py     what a request says of the import (model file, shapes, io dtype)
    build.py      the import as built: weights, names, tolerance, what verification compares
"""

from __future__ import annotations

from pathlib import Path

from app.mil import get_target
from app.mil.ceilings import Ceilings
from app.onnx.build import OnnxBuild
from app.onnx.files import ModelFiles
from app.onnx.importer import import_onnx
from app.onnx.params import OnnxParams
from app.onnx.reader import ReadLimits

__all__ = ["ModelFiles", "OnnxBuild", "ReadLimits", "import_onnx", "onnx_program"]


def onnx_program(
    params: OnnxParams,
    paths: dict[str, Path],
    *,
    target: str,
    name: str,
    ceilings: Ceilings = Ceilings(),
    limits: ReadLimits = ReadLimits(),
) -> OnnxBuild:
    """The program of an ONNX request (the request's one entry here): its files, each a file on
    this machine by the name it was given under, the model among them."""
    files = ModelFiles.of_uploads(params.model, paths)
    return import_onnx(
        params, files, target=get_target(target), name=name, ceilings=ceilings, limits=limits
    )
