"""Zip layout, kernel.json, manifest, protobuf shape, and byte-for-byte determinism."""

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest
from coremltools.proto import MIL_pb2, Model_pb2

from app.artifacts import kernel_zip
from app.blob import BlobReader
from app.catalog_build import build_kernel
from app.packaging import write_kernel_zip
from app.packaging.digesting import DigestingWriter

CONV = {"in_channels": 16, "out_channels": 32, "spatial": 4, "bias": True}


def _zip(data: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(data))


def _weights(seed=3):
    rng = np.random.default_rng(seed)
    return {
        "weight": rng.standard_normal((32, 16), dtype=np.float32),
        "bias": np.arange(32, dtype=np.float32),
    }


def test_mlpackage_layout_and_kernel_json():
    zf = _zip(kernel_zip("conv", CONV, _weights(), name="proj"))
    files = [n for n in zf.namelist() if not n.endswith("/")]
    assert files == sorted(files)
    assert set(files) == {
        "kernel.json",
        "proj.mlpackage/Manifest.json",
        "proj.mlpackage/Data/com.apple.CoreML/model.mlmodel",
        "proj.mlpackage/Data/com.apple.CoreML/weights/weight.bin",
    }
    info = json.loads(zf.read("kernel.json"))
    assert info["op"] == "conv" and info["name"] == "proj" and info["target"] == "ios18"
    assert info["params"] == {**CONV, "io_dtype": "fp16", "weight_dtype": "fp16"}
    assert info["inputs"] == [{"name": "x", "shape": [1, 16, 1, 4], "dtype": "fp16"}]
    assert info["outputs"] == [{"name": "y", "shape": [1, 32, 1, 4], "dtype": "fp16"}]
    w = np.ascontiguousarray(_weights()["weight"])
    assert (
        info["weights"]["weight"]["sha256"] == "sha256:" + hashlib.sha256(w.tobytes()).hexdigest()
    )
    assert info["weights"]["weight"]["stored_dtype"] == "fp16"
    assert info["generator"]["name"] == "ane-kernels" and info["coremltools_version"]


def test_weights_are_stored_as_fp16_at_the_referenced_offsets(tmp_path):
    zf = _zip(kernel_zip("conv", CONV, _weights()))
    spec = Model_pb2.Model.FromString(zf.read("conv.mlpackage/Data/com.apple.CoreML/model.mlmodel"))
    blob = BlobReader(zf.read("conv.mlpackage/Data/com.apple.CoreML/weights/weight.bin"))
    ops = {
        op.outputs[0].name: op
        for op in spec.mlProgram.functions["main"].block_specializations["CoreML8"].operations
        if op.outputs
    }
    offset = ops["weight"].attributes["val"].blobFileValue.offset
    stored = blob.read(offset).reshape(32, 16)
    np.testing.assert_array_equal(stored, _weights()["weight"].astype(np.float16))
    bias = blob.read(ops["bias"].attributes["val"].blobFileValue.offset)
    np.testing.assert_array_equal(bias, np.arange(32, dtype=np.float16))
    assert (
        ops["weight"].attributes["val"].blobFileValue.fileName == "@model_path/weights/weight.bin"
    )


def test_protobuf_shape_matches_what_coremltools_emits():
    zf = _zip(kernel_zip("rmsnorm", {"channels": 8, "spatial": 4}, random_seed=0))
    spec = Model_pb2.Model.FromString(
        zf.read("rmsnorm.mlpackage/Data/com.apple.CoreML/model.mlmodel")
    )
    assert spec.specificationVersion == 9 and spec.mlProgram.version == 1
    fn = spec.mlProgram.functions["main"]
    assert fn.opset == "CoreML8" and list(fn.block_specializations) == ["CoreML8"]
    block = fn.block_specializations["CoreML8"]
    assert list(block.outputs) == ["y"]
    for op in block.operations:
        assert op.attributes["name"].immediateValue.tensor.strings.values
        for arg in op.inputs.values():  # parameters are bound by name to const ops, never inline
            assert all(binding.name and not binding.HasField("value") for binding in arg.arguments)
    build_info = spec.mlProgram.attributes["buildInfo"]
    keys = [
        kv.key.immediateValue.tensor.strings.values[0]
        for kv in build_info.immediateValue.dictionary.values
    ]
    assert "coremltools-version" in keys
    assert build_info.type.dictionaryType.keyType.tensorType.dataType == MIL_pb2.DataType.STRING
    (inp,) = spec.description.input
    assert (
        list(inp.type.multiArrayType.shape) == [1, 8, 1, 4]
        and inp.type.multiArrayType.dataType == 65552
    )


def test_state_package_has_state_description_and_empty_weights_dir():
    zf = _zip(kernel_zip("update_state", {"state_name": "kv", "shape": [1, 4, 8]}))
    names = zf.namelist()
    assert "update_state.mlpackage/Data/com.apple.CoreML/weights/" in names
    assert not any(n.endswith("weight.bin") for n in names)
    spec = Model_pb2.Model.FromString(
        zf.read("update_state.mlpackage/Data/com.apple.CoreML/model.mlmodel")
    )
    (state,) = spec.description.state
    assert state.name == "kv" and list(state.type.stateType.arrayType.shape) == [1, 4, 8]
    assert [i.name for i in spec.description.input] == ["value"]


def test_mil_bundle_layout():
    zf = _zip(kernel_zip("conv", CONV, _weights(), format="mil"))
    assert sorted(n for n in zf.namelist() if not n.endswith("/")) == [
        "kernel.json",
        "model.mil",
        "weights/weight.bin",
    ]
    text = zf.read("model.mil").decode()
    assert text.startswith("program(1.3)\n") and "offset = uint64(64)" in text


def test_same_request_same_bytes():
    a = kernel_zip("conv", CONV, _weights())
    b = kernel_zip("conv", CONV, _weights())
    assert a == b
    assert kernel_zip(
        "sdpa", {"n_heads": 2, "head_dim": 8, "seq_len": 4, "causal": True}, format="mil"
    ) == (
        kernel_zip(
            "sdpa", {"n_heads": 2, "head_dim": 8, "seq_len": 4, "causal": True}, format="mil"
        )
    )
    assert kernel_zip("conv", CONV, _weights(seed=4)) != a
    for info in _zip(a).infolist():
        assert info.date_time == (1980, 1, 1, 0, 0, 0)


def test_manifest_ids_derive_from_content():
    m1 = json.loads(_zip(kernel_zip("conv", CONV, _weights())).read("conv.mlpackage/Manifest.json"))
    m2 = json.loads(
        _zip(kernel_zip("conv", CONV, _weights(seed=9))).read("conv.mlpackage/Manifest.json")
    )
    assert m1["rootModelIdentifier"] in m1["itemInfoEntries"]
    assert m1["rootModelIdentifier"] != m2["rootModelIdentifier"]
    paths = sorted(e["path"] for e in m1["itemInfoEntries"].values())
    assert paths == ["com.apple.CoreML/model.mlmodel", "com.apple.CoreML/weights"]


def _blob_entries(build) -> int:
    out = io.BytesIO()
    write_kernel_zip(build, out, "mil")
    return len(BlobReader(_zip(out.getvalue()).read("weights/weight.bin")).entries())


def test_identical_tensors_share_one_blob_entry():
    # in_channels=1 makes weight [16, 1, 1, 1] and bias [16] the same 16 values: stored once.
    params = {"in_channels": 1, "out_channels": 16, "spatial": 2, "bias": True}
    same = np.linspace(-1, 1, 16, dtype=np.float32)
    assert (
        _blob_entries(build_kernel("conv", params, {"weight": same.reshape(16, 1), "bias": same}))
        == 1
    )
    assert (
        _blob_entries(
            build_kernel("conv", params, {"weight": same.reshape(16, 1), "bias": same[::-1].copy()})
        )
        == 2
    )


def test_fp32_weights_stay_fp32_when_asked():
    params = {"in_channels": 8, "out_channels": 8, "spatial": 2, "weight_dtype": "fp32"}
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    zf = _zip(kernel_zip("conv", params, {"weight": w}, format="mil"))
    blob = BlobReader(zf.read("weights/weight.bin"))
    np.testing.assert_array_equal(blob.read(64).reshape(8, 8), w)
    assert "tensor<fp32, [8, 8, 1, 1]> weight" in zf.read("model.mil").decode()


class _Pipe(io.RawIOBase):
    """A destination that cannot seek or tell, like a socket."""

    def __init__(self):
        self.data = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.data += b
        return len(memoryview(b).cast("B"))


def test_zip_is_written_front_to_back():
    """No seeking: every entry carries a data descriptor, so the bytes can go to a pipe and be
    hashed on the way out; the result is the same zip, and it reads back."""
    build = build_kernel("conv", CONV, _weights())
    pipe, buf = _Pipe(), io.BytesIO()
    write_kernel_zip(build, pipe)
    write_kernel_zip(build, buf)
    assert bytes(pipe.data) == buf.getvalue()
    zf = _zip(buf.getvalue())
    assert zf.testzip() is None
    assert all(info.flag_bits & 0x08 for info in zf.infolist())


@pytest.mark.parametrize("rows", [4, 2048])  # a few KiB (hashed inline) and 2 MiB (on a thread)
def test_digesting_writer_hashes_what_reaches_the_file(tmp_path, rows):
    weights = {"weight": np.random.default_rng(rows).standard_normal((rows, 512), np.float32)}
    build = build_kernel("conv", {"in_channels": 512, "out_channels": rows, "spatial": 2}, weights)
    path = tmp_path / "k.zip"
    with open(path, "wb") as f, DigestingWriter(f, keep_up_to=1 << 20) as out:
        write_kernel_zip(build, out)
        digest, content = out.digest(), out.content()
    data = path.read_bytes()
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert out.size == len(data)
    assert content == (data if len(data) <= 1 << 20 else None)


def test_every_format_has_its_packager():
    """The builder asks the format's packager (app/packagers.py) what the format needs: each
    format of the service has one, named for it."""
    from app.core.formats import FORMATS
    from app.packagers import PACKAGERS

    assert set(PACKAGERS) == set(FORMATS)
    assert all(packager.format == name for name, packager in PACKAGERS.items())
