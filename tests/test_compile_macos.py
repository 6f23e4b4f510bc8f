"""The real compilers on a Mac: `xcrun coremlcompiler` and Core ML through coremltools, plus
MLComputePlan placement. Run on a Mac with Xcode 16+ (macOS 14.4+ for placement):

    .venv/bin/pytest -m macos

Elsewhere every test here is skipped with the reason.
"""

import asyncio
import json
import shutil
import sys
import zipfile

import numpy as np
import pytest

from app.artifacts import prepare
from app.compile import compile_kernel_zip
from app.compile.coremltools_backend import CoreMLToolsCompiler
from app.compile.coremltools_backend import available as coremltools_can_compile
from app.compile.placement import unavailable_reason
from app.compile.xcrun import XcrunCompiler
from app.request import KernelRequest

pytestmark = [
    pytest.mark.macos,
    pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS with Xcode (coremlcompiler)"),
]

needs_xcrun = pytest.mark.skipif(
    shutil.which("xcrun") is None or "fake_xcrun" in (shutil.which("xcrun") or ""),
    reason="needs macOS with Apple's xcrun (Xcode 16+) on PATH",
)


def conv():
    params = {"in_channels": 64, "out_channels": 64, "spatial": 16}
    return prepare(KernelRequest.create("conv", params, format="mlmodelc"), random_seed=0)


@needs_xcrun
def test_xcrun_compiles_a_conv_and_the_result_runs(tmp_path):
    result = asyncio.run(compile_kernel_zip(conv(), XcrunCompiler(), tmp_path, 300))
    with zipfile.ZipFile(result.zip_path) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "unzipped")
        kernel = json.loads(zf.read("kernel.json"))
    assert any(n.startswith("conv.mlmodelc/") and n.endswith("coremldata.bin") for n in names)
    assert kernel["compiler"]["toolchain"]["xcode"].startswith("Xcode")
    assert kernel["compiler"]["toolchain"]["macos_build"]

    import coremltools as ct

    model = ct.models.CompiledMLModel(str(tmp_path / "unzipped" / "conv.mlmodelc"))
    x = np.ones((1, 64, 1, 16), dtype=np.float16)
    y = model.predict({"x": x})["y"]
    assert y.shape == (1, 64, 1, 16)


@needs_xcrun
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_placement_report_counts_every_op(tmp_path):
    result = asyncio.run(compile_kernel_zip(conv(), XcrunCompiler(), tmp_path, 300))
    placement = result.placement
    assert placement["available"] is True
    summary = placement["summary"]
    assert summary["ops"] == len(placement["ops"]) > 0
    assert summary["ane"] + summary["gpu"] + summary["cpu"] + summary["unplaced"] == summary["ops"]
    assert any(o["op"] == "conv" for o in placement["ops"])


@pytest.mark.skipif(
    not coremltools_can_compile(), reason="needs macOS with coremltools built against Core ML"
)
def test_coremltools_backend_compiles(tmp_path):
    result = asyncio.run(compile_kernel_zip(conv(), CoreMLToolsCompiler(), tmp_path, 300))
    with zipfile.ZipFile(result.zip_path) as zf:
        assert any(n.startswith("conv.mlmodelc/") for n in zf.namelist())
    assert result.toolchain["compiler"] == "coremltools"
