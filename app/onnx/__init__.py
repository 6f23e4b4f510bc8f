"""ONNX in: an exported model (torch.onnx.export, optimum-cli export onnx) read bounded and
checked, its shape arithmetic evaluated at import, its ops lowered onto the IR's primitives into
one program, and verified against onnxruntime (docs/onnx.md). The package imports nothing here:
onnx and onnxruntime are an extra, loaded by the modules that read a model, and the request
layer reads only `params`.

    reader.py     the model file parsed within limits; opsets, graph, names, shapes checked
    files.py      where the model's files are; external-data locations held to its folder
    tensors.py    initializers read by offset (external data), into fp16, range-checked
    lowering.py   the driver: constants evaluated, nodes lowered, every unsupported node named
    ops_*.py      each ONNX op's lowering; patterns.py the subgraphs lowered as one op
    support.py    which ops import and which wait on a primitive
    importer.py   the model -> one program (names, input shapes, dtypes); a request's entry
    params.py     what a request says of the import (model file, shapes, io dtype)
    build.py      the import as built: weights, names, tolerance, what verification compares
"""
