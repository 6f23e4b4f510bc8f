"""Whole programs through the compiler and back: coremltools-built models and Apple's newer texts.

coremltools' own builder and converter make the sources (control flow, states, flexible shapes,
several functions); coremltools' own loader (`app.reference.validation`) checks the packages `decompile`
rebuilds. Apple's 3520/3600 `model.mil` texts are recompiled from the program they hold and a
description carrying the facts their bundles state (spec 9, the flexible inputs' default shapes
and ranges): the compiler must write those texts again, FlexibleShapeInformation included.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from mlmodelc_support import GOLDENS, coremltools_loads, files_of

from app.language.parser import parse_program
from app.language.profiles import get_profile
from app.mlmodelc import compile_package, decompile
from app.mlmodelc.coremldata import read_coremldata
from app.mlmodelc.decompiler import model_bytes

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import get_new_symbol, types
    from coremltools.proto import FeatureTypes_pb2, Model_pb2

APPLE_TEXTS = GOLDENS / "apple-mil-text"


def convert(prog, target, path: Path, **kwargs) -> Path:
    with contextlib.redirect_stderr(io.StringIO()):
        model = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=target,
            skip_model_load=True,
            **kwargs,
        )
    model.save(str(path))
    return path


def control_flow(tmp: Path) -> Path:
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        pred = mb.greater(x=mb.reduce_sum(x=x), y=np.float32(0.0))
        c = mb.cond(
            pred=pred,
            _true_fn=lambda: mb.add(x=x, y=np.float32(1.0)),
            _false_fn=lambda: mb.mul(x=x, y=np.float32(2.0)),
        )
        _, acc = mb.while_loop(
            _cond=lambda i, acc: mb.less(x=i, y=np.int32(5)),
            _body=lambda i, acc: (mb.add(x=i, y=np.int32(1)), mb.add(x=acc, y=c)),
            loop_vars=(np.int32(0), c),
        )
        w = mb.const(val=np.arange(24, dtype=np.float32).reshape(3, 8))
        return mb.matmul(x=acc, y=w)

    return convert(
        prog,
        ct.target.iOS17,
        tmp / "control_flow.mlpackage",
        compute_precision=ct.precision.FLOAT32,
    )


def stateful(tmp: Path) -> Path:
    @mb.program(
        input_specs=[
            mb.StateTensorSpec((1, 4), dtype=types.fp16),
            mb.TensorSpec((1, 4), dtype=types.fp16),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(kv, x):
        mb.coreml_update_state(state=kv, value=x)
        return mb.add(x=mb.read_state(input=kv), y=x)

    return convert(prog, ct.target.iOS18, tmp / "stateful.mlpackage")


def flexible(tmp: Path) -> Path:
    @mb.program(
        input_specs=[mb.TensorSpec(shape=(1, get_new_symbol()))], opset_version=ct.target.iOS17
    )
    def prog(x):
        return mb.relu(x=x)

    shape = (1, ct.RangeDim(1, 64, default=8))
    return convert(
        prog,
        ct.target.iOS17,
        tmp / "flexible.mlpackage",
        inputs=[ct.TensorType(name="x", shape=shape)],
    )


def multifunction(tmp: Path) -> Path:
    def part(index: int, activation: str) -> Path:
        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS18)
        def prog(x):
            w = mb.const(val=np.arange(40, dtype=np.float32).reshape(4, 10) * (index + 1))
            return mb.matmul(x=getattr(mb, activation)(x=x), y=w)

        return convert(prog, ct.target.iOS18, tmp / f"part{index}.mlpackage")

    parts = [part(0, "relu"), part(1, "sigmoid")]
    descriptor = ct.utils.MultiFunctionDescriptor()
    descriptor.add_function(str(parts[0]), "main", "first")
    descriptor.add_function(str(parts[1]), "main", "second")
    descriptor.default_function_name = "second"
    with contextlib.redirect_stderr(io.StringIO()):
        ct.utils.save_multifunction(descriptor, str(tmp / "multifunction.mlpackage"))
    return tmp / "multifunction.mlpackage"


MAKERS = {
    "control_flow": control_flow,
    "stateful": stateful,
    "flexible": flexible,
    "multifunction": multifunction,
}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def source(request, tmp_path_factory) -> Path:
    return MAKERS[request.param](tmp_path_factory.mktemp(request.param))


# observed releases, a release seen with a second MIL component, and a release never observed
# (written with the nearest observed release's rules): each round trip keeps the bundle's pair
PAIRS = [
    ("3500.32.1", None),
    ("3600.25.1", None),
    ("3500.32.1", "3510.2.1"),
    ("3505.4.1", "3510.2.1"),
]


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(filter(None, p)) for p in PAIRS])
def test_compile_decompile_validate_compile(source, pair, tmp_path):
    """compile -> decompile gives a package coremltools loads; compiling that gives the same
    bundle (analytics aside: it hashes a different spec file)."""
    profile = get_profile(*pair)
    first = compile_package(source, tmp_path / "first.mlmodelc", profile).path
    package = decompile(first, tmp_path / "back.mlpackage")
    assert package.profile == profile
    assert coremltools_loads(package.path) > 0
    second = compile_package(package.path, tmp_path / "first.mlmodelc.again", package.profile).path
    assert files_of(second) == files_of(first)
    for name in files_of(first):
        if name == "metadata.json":
            mine = json.loads((second / name).read_text())[0]
            assert mine.pop("generatedClassName") == "first_mlmodelc_again"
            theirs = json.loads((first / name).read_text())[0]
            theirs.pop("generatedClassName")
            assert mine == theirs
        elif name != "analytics/coremldata.bin":
            assert (second / name).read_bytes() == (first / name).read_bytes(), name
    parsed = parse_program((first / "model.mil").read_text())
    spec = ct.utils.load_spec(str(source))
    for name, fn in spec.mlProgram.functions.items():
        block = parsed.program.functions[name].block_specializations[fn.opset]
        assert block == fn.block_specializations[fn.opset]


def test_multifunction_bundle(tmp_path):
    source = multifunction(tmp_path)
    bundle = compile_package(source, tmp_path / "mf.mlmodelc").path
    data = (bundle / "coremldata.bin").read_bytes()
    _, description = read_coremldata(data)
    desc = Model_pb2.ModelDescription()
    desc.ParseFromString(description)
    assert [f.name for f in desc.functions] == ["first", "second"]
    assert desc.defaultFunctionName == "second"
    trailer = struct.pack("<I12x", 502)
    assert data[0x53 + len(description) :] == trailer * 2
    meta = json.loads((bundle / "metadata.json").read_text())[0]
    assert meta["defaultFunctionName"] == "second"
    assert [f["name"] for f in meta["functions"]] == ["first", "second"]
    text = (bundle / "model.mil").read_text()
    assert text.index("func first<ios18>") < text.index("func second<ios18>")


def test_flexible_input_gets_flexible_shape_information_from_newer_profiles(tmp_path):
    source = flexible(tmp_path)
    new = compile_package(source, tmp_path / "new.mlmodelc", get_profile("3600.25.1")).path
    old = compile_package(source, tmp_path / "old.mlmodelc", get_profile("3500.32.1")).path
    assert (
        "func main<ios17>(tensor<fp32, [1, ?]> x) [FlexibleShapeInformation = "
        "tuple<tuple<tensor<string, []>, dict<tensor<string, []>, tensor<int32, [?]>>>, "
        "tuple<tensor<string, []>, dict<tensor<string, []>, list<tensor<int32, [2]>, ?>>>>"
        '((("DefaultShapes", {{"x", [1, 8]}}), ("RangeDims", {{"x", [[1, 1], [1, 64]]}})))] {'
    ) in (new / "model.mil").read_text()
    assert "FlexibleShapeInformation" not in (old / "model.mil").read_text()
    schema = json.loads((new / "metadata.json").read_text())[0]["inputSchema"][0]
    assert (
        schema["shapeFlexibility"] == "1 × 1...64" and schema["shapeRange"] == "[[1, 1], [1, 64]]"
    )
    assert schema["shape"] == "[1, 8]" and schema["hasShapeFlexibility"] == "1"


def _array(
    feature, dtype: int, shape: list[int], ranges: list[tuple[int, int]] | None = None
) -> None:
    array = feature.type.multiArrayType
    array.dataType = dtype
    array.shape.extend(shape)
    for lower, upper in ranges or []:
        r = array.shapeRange.sizeRanges.add()
        r.lowerBound, r.upperBound = lower, upper


A = FeatureTypes_pb2.ArrayFeatureType


def _description(name: str) -> Model_pb2.ModelDescription:
    """What the bundles of mlmodelc-export's fixtures say about their inputs (metadata.json)."""
    desc = Model_pb2.ModelDescription()
    if name == "flexible-multifunction":
        for fn_name, default in (("first", 4), ("second", 2)):
            fn = desc.functions.add()
            fn.name = fn_name
            feature = fn.input.add()
            feature.name = "input"
            _array(feature, A.FLOAT32, [default], [(0, 4)])
            out = fn.output.add()
            out.name = "output"
            _array(out, A.FLOAT32, [4], [(0, 4)])
        desc.defaultFunctionName = "second"
    elif name == "flexible-gather":
        data, indices = desc.input.add(), desc.input.add()
        data.name, indices.name = "data", "indices"
        _array(data, A.FLOAT32, [3, 2])
        _array(indices, A.INT32, [2, 4], [(0, 2), (0, 4)])
    else:
        feature = desc.input.add()
        feature.name = "input"
        _array(feature, A.FLOAT32, [5 if "fp16" in name else 4])
    return desc


def _blob_file(path: Path, payload: bytes) -> None:
    """A Blob Storage v2 file holding one int8 entry whose metadata starts at offset 64."""
    header = struct.pack("<II56x", 1, 2)
    metadata = struct.pack("<IIQQQ32x", 0xDEADBEEF, 8, len(payload), 128, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + metadata + payload)


@pytest.mark.parametrize("text_path", sorted(APPLE_TEXTS.glob("*.mil")), ids=lambda p: p.stem)
def test_apple_newer_texts_recompiled(text_path, tmp_path):
    """The program in Apple's text, with the description its bundle had, compiled with the
    profile named in its buildInfo, gives Apple's text back."""
    text = text_path.read_text()
    _, version, name = text_path.stem.split("-", 2)
    parsed = parse_program(text).program
    del parsed.attributes["buildInfo"]
    for fn in parsed.functions.values():
        if "FlexibleShapeInformation" in fn.attributes:
            del fn.attributes["FlexibleShapeInformation"]
    description = _description(name).SerializeToString()
    package = tmp_path / f"{name}.mlpackage"
    spec = package / "Data/com.apple.CoreML/model.mlmodel"
    spec.parent.mkdir(parents=True)
    spec.write_bytes(model_bytes(9, description, parsed, updatable=False))
    if "quantized" in name:
        _blob_file(package / "Data/com.apple.CoreML/weights/weights.bin", bytes([1, 2, 3, 4]))
    bundle = compile_package(package, tmp_path / f"{name}.mlmodelc", get_profile(version)).path
    assert (bundle / "model.mil").read_text() == text
