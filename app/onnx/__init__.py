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
    build.py      the import as built: weights, names, tolerance
    verify.py     verification.json against onnxruntime
"""

from __future__ import annotations

from app.errors import RequestError
from app.mil import get_target
from app.mil.ceilings import Ceilings
from app.onnx.build import OnnxBuild
from app.onnx.files import ModelFiles
from app.onnx.importer import import_onnx
from app.onnx.reader import ReadLimits
from app.onnx.verify import verify_onnx
from app.request import ONNX_OP, KernelRequest, OnnxParams

__all__ = ["ModelFiles", "OnnxBuild", "import_onnx", "onnx_program", "verify_onnx"]


def onnx_program(
    request: KernelRequest, ceilings: Ceilings = Ceilings(), limits: ReadLimits = ReadLimits()
) -> OnnxBuild:
    """The program of an ONNX request (the artifact builder's one entry here): its files are
    the request's weights, each a file on this machine by the name it was given under."""
    paths = {}
    for name, ref in request.weights.items():
        if ref.file is None:
            raise RequestError(f"files.{name}", "an ONNX import reads its files from disk")
        paths[name] = ref.file.path
    params = request.params
    assert isinstance(params, OnnxParams)
    files = ModelFiles.of_uploads(params.model, paths)
    return import_onnx(
        params,
        files,
        target=get_target(request.target),
        name=request.name or ONNX_OP,
        ceilings=ceilings,
        limits=limits,
    )
