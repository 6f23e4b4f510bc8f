"""Device compile of an .aimodel (`xcrun coreai-build compile`, per architecture) against the
labelled stand-in xcrun (tests/fake_xcrun): the argv the service sends, the per-architecture
bundles in the zip, and the GPU-only bundle coreai-build writes with exit 0 when the Neural
Engine compile fails (apple/coreai-models #205), refused naming the architecture."""

import asyncio
import json
import zipfile

import pytest
import test_compile_xcrun

pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")

from app.artifacts import prepare
from app.compile import CompilerError
from app.compile.aimodelc import compile_aimodelc_zip
from app.compile.coreai_build import CoreAIBuild, check_architectures
from app.devices import CHIPS_BY_NAME
from app.devices import COREAI_ARCHITECTURES as ARCHITECTURES
from app.errors import RequestError
from app.request import KernelRequest

stand_in = test_compile_xcrun.stand_in  # PATH with the labelled stand-in xcrun first


def _prepared():
    params = {"in_channels": 8, "out_channels": 8, "spatial": 2}
    return prepare(KernelRequest.create("conv", params, format="aimodel"), random_seed=0)


def _compile(tmp_path, architectures):
    work = tmp_path / "work"
    work.mkdir()
    return asyncio.run(compile_aimodelc_zip(_prepared(), CoreAIBuild(), work, architectures, 60))


def test_each_architecture_is_compiled_and_zipped_with_its_ane_regions(stand_in, tmp_path):
    path, description = _compile(tmp_path, ["m4", "a17-pro"])
    starts = [json.loads(line) for line in stand_in.read_text().splitlines()]
    assert [e["argv"] for e in starts if e["event"] == "start"] == [
        [
            "coreai-build",
            "compile",
            "src/conv.aimodel",
            "--architecture",
            arch,
            "--output",
            f"out/{arch}",
        ]
        for arch in ("m4", "a17-pro")
    ]
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        kernel = json.loads(zf.read("kernel.json"))
    assert {
        "m4/conv.aimodelc/main.mlirb",
        "a17-pro/conv.aimodelc/main.mlirb",
        "conv.aimodel/main.mlirb",
        "compile.log",
    } <= names
    assert kernel["aimodelc"]["architectures"]["m4"]["ane_regions"] == ["conv_ANE_region_0.bc.mlir"]
    assert kernel["aimodelc"]["toolchain"]["coreai_build"].endswith(
        "(STAND-IN for Apple's coreai-build)"
    )
    assert description == kernel


def test_a_gpu_only_bundle_is_refused_naming_its_architecture(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_COREAI_GPU_ONLY", "a18")
    with pytest.raises(CompilerError) as caught:
        _compile(tmp_path, ["m4", "a18"])
    assert "for a18 with no Neural Engine region" in caught.value.message
    assert "#205" in caught.value.message


def test_architectures_come_from_the_device_table():
    # AOT: A17 Pro / M1 and newer, named as the device table names its chips
    assert {"m1", "m1-max", "m5", "a17-pro", "a18-pro", "a19-pro"} <= set(ARCHITECTURES)
    assert not {"a15", "a16"} & set(ARCHITECTURES)
    assert set(ARCHITECTURES) <= set(CHIPS_BY_NAME)
    with pytest.raises(RequestError) as caught:
        check_architectures(["m4", "h16"])
    assert caught.value.field == "architectures[1]"
    assert "'h16'" in caught.value.message and "a18-pro" in caught.value.message
    with pytest.raises(RequestError):
        check_architectures([])
    with pytest.raises(RequestError) as caught:
        check_architectures(["m4", "m4"])
    assert caught.value.field == "architectures"
