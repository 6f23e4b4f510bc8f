"""The original model run by onnxruntime (CPU, float32): what an import's program is compared with
(verification.json, and Apple's runtime beside it for `.aimodel`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto, TensorProto, helper

from app.errors import RequestError
from app.onnx.files import ModelFiles


@dataclass(frozen=True)
class OnnxIO:
    """One input or output of the model: its ONNX name and type, its program name."""

    onnx_name: str
    name: str
    elem_type: int  # ONNX TensorProto data type
    shape: tuple[int, ...]
    id_range: int | None = None  # an integer input that indexes a table: its size


def _model_bytes(files: ModelFiles, overrides: Mapping[str, np.ndarray]) -> bytes:
    """The model with its external data inside (onnxruntime resolves external files itself and
    refuses links; read from the files the import checked), for onnxruntime to load; the
    initializers named in `overrides` hold those values instead."""
    from onnx import numpy_helper

    proto = ModelProto()
    proto.ParseFromString(files.model_path.read_bytes())
    for tensor in proto.graph.initializer:
        if tensor.name in overrides:
            dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
            value = np.asarray(overrides[tensor.name]).astype(dtype).reshape(tuple(tensor.dims))
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
            continue
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        _, path = files.external(info.get("location", ""), tensor.name)
        nbytes = math.prod(tensor.dims) * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        with open(path, "rb") as f:
            f.seek(int(info.get("offset", 0)))
            tensor.raw_data = f.read(nbytes)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
    try:
        return proto.SerializeToString()
    except ValueError:  # protobuf's 2 GiB
        raise RequestError("verify", "the model is too large to verify here (over 2 GiB)") from None


def run_original(
    files: ModelFiles,
    inputs: Sequence[OnnxIO],
    outputs: Sequence[OnnxIO],
    values: Mapping[str, np.ndarray],
    overrides: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The original model's outputs (float64, by program name) on the program's input `values`
    (by program name, given to onnxruntime in each input's ONNX dtype); with `overrides`, the
    initializers they name hold their values (quantized weights as the program decompresses
    them)."""
    import onnxruntime as ort

    feeds = {}
    for io in inputs:
        dtype = helper.tensor_dtype_to_np_dtype(io.elem_type)
        if io.elem_type == TensorProto.BFLOAT16:
            dtype = np.dtype(np.float32)
        feeds[io.onnx_name] = values[io.name].astype(dtype)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: its shape-merge warnings are not ours
    options.intra_op_num_threads = 1  # one build, one core: the same sums on every machine
    # the model's own ops as written: onnxruntime's graph optimizations rewrite a weight-only
    # QDQ MatMul into an integer product that quantizes the activations too
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = _model_bytes(files, overrides or {})
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        results = session.run([io.onnx_name for io in outputs], feeds)
    except Exception as exc:  # onnxruntime's own refusal (an opset it lacks, a bad model)
        raise RequestError(
            "verify", f"onnxruntime {ort.__version__} cannot run the model: {exc}"
        ) from None
    return {io.name: np.asarray(r, np.float64) for io, r in zip(outputs, results, strict=True)}


def onnxruntime_version() -> str:
    import onnxruntime as ort

    return ort.__version__
