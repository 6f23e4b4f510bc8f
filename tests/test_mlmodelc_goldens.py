"""The `.mlmodelc` writer against bundles Apple's compiler wrote (tests/fixtures/goldens)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from mlmodelc_support import (
    ADD_MODEL,
    MIL_TEXTS,
    SILERO,
    bundle_of,
    coremldata_modulo_map_order,
    files_of,
    read_model,
)

from app.language.parser import parse_program
from app.language.printer import print_program
from app.language.profiles import get_profile
from app.mlmodelc import compile_package, decompile
from app.mlmodelc.analytics import read_analytics
from app.mlmodelc.coremldata import read_coremldata

IDS = [p.name for p in SILERO]


@pytest.fixture(scope="module", params=SILERO, ids=IDS)
def compiled(request, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(source package, Apple's bundle, ours) for one golden pair, ours compiled with the
    default profile."""
    golden = bundle_of(request.param)
    ours = tmp_path_factory.mktemp("ours") / golden.name
    compile_package(request.param / "source.mlpackage", ours)
    return request.param / "source.mlpackage", golden, ours


def test_same_files(compiled):
    _, golden, ours = compiled
    assert files_of(ours) == files_of(golden)


@pytest.mark.parametrize(
    "name", ["model.mil", "metadata.json", "analytics/coremldata.bin", "weights/weight.bin"]
)
def test_file_byte_identical(compiled, name):
    _, golden, ours = compiled
    assert (ours / name).read_bytes() == (golden / name).read_bytes()


def test_coremldata_identical_but_for_apples_map_order(compiled):
    _, golden, ours = compiled
    apple, mine = (golden / "coremldata.bin").read_bytes(), (ours / "coremldata.bin").read_bytes()
    assert len(mine) == len(apple)
    assert coremldata_modulo_map_order(mine) == coremldata_modulo_map_order(apple)


def test_apple_map_order_is_not_a_function_of_the_source():
    """Why coremldata.bin cannot match byte for byte: three goldens compiled from byte-identical
    descriptions hold the userDefined entries in three different orders."""
    descriptions = set()
    orders = set()
    for pair in SILERO[1:]:
        source = read_model(pair / "source.mlpackage/Data/com.apple.CoreML/model.mlmodel")
        descriptions.add(source.description.SerializeToString(deterministic=True))
        _, apple = read_coremldata((bundle_of(pair) / "coremldata.bin").read_bytes())
        orders.add(apple)
    assert len(descriptions) == 1 and len(orders) == 3


def test_analytics_hashes_the_source_spec(compiled):
    _, golden, ours = compiled
    source = next(Path(p) for p in SILERO if bundle_of(p) == golden) / "source.mlpackage"
    spec = (source / "Data/com.apple.CoreML/model.mlmodel").read_bytes()
    sections = read_analytics((ours / "analytics/coremldata.bin").read_bytes())
    expected = base64.b64encode(hashlib.sha256(spec).digest()).decode()
    assert sections["SpecificationDetails"] == {"modelHash": expected, "modelName": "model"}


@pytest.mark.parametrize("pair", SILERO, ids=IDS)
def test_decompile_then_compile_gives_apples_bundle(pair, tmp_path):
    """From Apple's bundle alone: every file back, coremldata.bin included (the description's
    bytes travel through the package unchanged)."""
    golden = bundle_of(pair)
    package = decompile(golden, tmp_path / "rebuilt.mlpackage")
    assert package.profile == get_profile("3500.32.1")
    again = compile_package(package.path, tmp_path / golden.name, package.profile).path
    assert files_of(again) == files_of(golden)
    for name in files_of(golden):
        if name != "analytics/coremldata.bin":
            assert (again / name).read_bytes() == (golden / name).read_bytes(), name


def test_source_less_golden_round_trip(tmp_path):
    """coremltools' add_model (coremlc 3402): decompile -> compile gives Apple's model.mil,
    coremldata.bin and metadata.json byte for byte. analytics/coremldata.bin matches except its
    modelHash, which hashes the original model.mlmodel; the bundle does not keep those bytes, so
    the hash is that of the rebuilt spec."""
    package = decompile(ADD_MODEL, tmp_path / "add_model.mlpackage")
    assert package.profile is not None and package.profile.coremlc_version == "3402.4.1"
    again = compile_package(package.path, tmp_path / "add_model.mlmodelc", package.profile).path
    assert files_of(again) == files_of(ADD_MODEL)
    for name in ("model.mil", "coremldata.bin", "metadata.json"):
        assert (again / name).read_bytes() == (ADD_MODEL / name).read_bytes(), name
    apple = read_analytics((ADD_MODEL / "analytics/coremldata.bin").read_bytes())
    mine = read_analytics((again / "analytics/coremldata.bin").read_bytes())
    rebuilt = (package.path / "Data/com.apple.CoreML/model.mlmodel").read_bytes()
    assert mine["NeuralNetworkModelDetails"] == apple["NeuralNetworkModelDetails"]
    assert mine["SpecificationDetails"]["modelName"] == apple["SpecificationDetails"]["modelName"]
    assert (
        mine["SpecificationDetails"]["modelHash"]
        == base64.b64encode(hashlib.sha256(rebuilt).digest()).decode()
    )


@pytest.mark.parametrize("path", MIL_TEXTS, ids=[f"{p.parent.name}/{p.name}" for p in MIL_TEXTS])
def test_text_to_protobuf_to_text(path):
    text = path.read_text("utf-8")
    parsed = parse_program(text)
    again = print_program(parsed.program, parsed.dialect, trailing_newline=parsed.trailing_newline)
    assert again == text


@pytest.mark.parametrize("pair", SILERO, ids=IDS)
def test_parsed_text_equals_the_source_program(pair):
    """Apple's text read back gives the source's operations, protobuf-equal."""
    source = read_model(pair / "source.mlpackage/Data/com.apple.CoreML/model.mlmodel").mlProgram
    parsed = parse_program((bundle_of(pair) / "model.mil").read_text("utf-8")).program
    for name, fn in source.functions.items():
        mine = parsed.functions[name]
        assert mine.opset == fn.opset
        assert sorted(mine.inputs, key=lambda v: v.name) == sorted(fn.inputs, key=lambda v: v.name)
        assert mine.block_specializations[fn.opset] == fn.block_specializations[fn.opset]
