"""Helpers for the quantized-weight tests: a Builder program packaged the way app.packaging packages
a kernel (same emitters, weight planner and manifest), without a catalog KernelBuild."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
from coremltools.libmilstoragepython import _BlobStorageReader
from coremltools.optimize import _utils as ct_utils

from app.mil import Builder, DType, Program, emit_text
from app.mil.to_proto import emit_proto
from app.packaging import build_info, manifest, plan_weights
from app.quantize import Compressed, add_compressed

DATA_DIR = "Data/com.apple.CoreML"


def write_weights(program: Program) -> tuple[bytes, dict[str, int]]:
    writer, offsets = plan_weights(program)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue(), offsets


def write_mlpackage(program: Program, root: Path, name: str = "k") -> Path:
    """`root/<name>.mlpackage` with Manifest.json, model.mlmodel and weights/weight.bin."""
    blob, offsets = write_weights(program)
    model = emit_proto(program, offsets, build_info()).SerializeToString(deterministic=True)
    pkg = root / f"{name}.mlpackage"
    (pkg / DATA_DIR / "weights").mkdir(parents=True)
    (pkg / DATA_DIR / "model.mlmodel").write_bytes(model)
    (pkg / DATA_DIR / "weights" / "weight.bin").write_bytes(blob)
    (pkg / "Manifest.json").write_bytes(manifest(model, blob[:64]))
    return pkg


def write_mil_bundle(program: Program, root: Path) -> Path:
    """`root/model.mil` + `root/weights/weight.bin`, as the mil format lays them out."""
    blob, offsets = write_weights(program)
    (root / "weights").mkdir(parents=True)
    (root / "weights" / "weight.bin").write_bytes(blob)
    (root / "model.mil").write_text(emit_text(program, offsets, build_info()))
    return root


def conv_program(compressed: Compressed, target: str, spatial: int = 3) -> Program:
    """y = conv(x, w) with w the compressed weight [out, in, 1, 1] (or [out, in], reshaped)."""
    b = Builder(target)
    shape = compressed.shape
    x = b.input("x", DType.FP16, (1, shape[1], 1, spatial))
    w = add_compressed(b, "w", compressed)
    if len(shape) == 2:
        w = b.op("reshape", "w_4d", x=w, shape=[shape[0], shape[1], 1, 1])
    return b.build([b.op("conv", "y", x=x, weight=w)])


def coremltools_decompress(op_type: str, values: dict[str, np.ndarray]) -> np.ndarray:
    """coremltools' own decompression of one constexpr op (its ops' `decompress` / value
    inference helpers), from the argument values."""
    from coremltools.converters.mil.mil.ops.defs.iOS16 import constexpr_ops as ios16
    from coremltools.converters.mil.mil.ops.defs.iOS18 import compression as ios18

    v = values
    if op_type == "constexpr_affine_dequantize":
        return ios16.constexpr_affine_dequantize.decompress(
            v["quantized_data"], v["zero_point"], v["scale"], int(v["axis"])
        )
    if op_type == "constexpr_lut_to_dense" and "shape" in v:
        return ios16.constexpr_lut_to_dense.decompress(v["lut"], v["indices"], v["shape"])
    if op_type == "constexpr_lut_to_dense":
        return ios18.constexpr_lut_to_dense.decompress(v["indices"], v["lut"], v.get("vector_axis"))
    if op_type == "constexpr_sparse_to_dense" and "shape" in v:
        return ios16.constexpr_sparse_to_dense.decompress(v["nonzero_data"], v["mask"], v["shape"])
    if op_type == "constexpr_sparse_to_dense":
        return ios18.constexpr_sparse_to_dense.decompress(v["nonzero_data"], v["mask"])
    if op_type == "constexpr_blockwise_shift_scale":
        return ios18.constexpr_blockwise_shift_scale.decompress(
            v["data"], v["scale"], v.get("offset")
        )
    raise AssertionError(op_type)


def coremltools_decompress_compressed(compressed: Compressed) -> np.ndarray:
    """The whole chain decompressed by coremltools (the pruned-int8 pair included)."""
    from coremltools.converters.mil.mil.ops.defs.iOS18 import compression as ios18

    first = compressed.ops[0]
    values = {k: p.array for k, p in first.params.items()}
    if first.op_type == "constexpr_sparse_blockwise_shift_scale":
        mask, nonzero = ios18.constexpr_sparse_blockwise_shift_scale.decompress(
            values["data_mask"], values["nonzero_data"], values["scale"], values.get("offset")
        )
        return ct_utils.sparse_to_dense(nonzero, mask)
    return coremltools_decompress(first.op_type, values)


def coremltools_blob_values(path: Path, offset: int, dtype: DType) -> np.ndarray:
    """One weight.bin entry as coremltools' own reader returns it."""
    reader = _BlobStorageReader(str(path))
    if dtype is DType.FP16:
        return reader.read_fp16_data(offset).view(np.float16)
    name = {DType.FP32: "float"}.get(dtype, dtype.value)
    return getattr(reader, f"read_{name}_data")(offset)


def coremltools_weight(pkg):
    """The conv's weight as coremltools decompresses it after loading the package itself."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load

    spec = ct.utils.load_spec(str(pkg))
    prog = load(spec, spec.specificationVersion, file_weights_dir=str(pkg / DATA_DIR / "weights"))
    conv = prog.functions["main"].find_ops(op_type="conv")[0]
    producer = conv.weight.op
    while producer.op_type == "reshape":
        producer = producer.x.op
    value = producer.materialized_val_inference()
    return value[1] if isinstance(value, tuple) else value
