"""The xcrun backend and the mlmodelc zip, against the labelled stand-in xcrun (tests/fake_xcrun).

The stand-in checks the argv the way coremlcompiler would and logs every compile, so these tests
pin what the service asks the real tool for; what the real tool then does is covered by the
`macos` tests (test_compile_macos.py).
"""

import asyncio
import json
import os
import zipfile
from pathlib import Path

import pytest

from app.artifacts import prepare
from app.compile import (
    CompilerCrashed,
    CompilerError,
    CompileTimeout,
    compile_kernel_zip,
    select_compiler,
)
from app.compile.xcrun import XcrunCompiler
from app.request import KernelRequest

FAKE = Path(__file__).parent / "fake_xcrun"


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """PATH with the stand-in xcrun first; returns the stand-in's compile log."""
    log = tmp_path / "xcrun.log"
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_XCRUN_LOG", str(log))
    for var in ("FAKE_XCRUN_SLEEP", "FAKE_XCRUN_FAIL", "FAKE_XCRUN_CRASH", "ANE_COMPILER"):
        monkeypatch.delenv(var, raising=False)
    return log


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def conv(name="conv", target="ios18"):
    params = {"in_channels": 4, "out_channels": 8, "spatial": 2}
    request = KernelRequest.create("conv", params, format="mlmodelc", target=target, name=name)
    return prepare(request, random_seed=0)


def compile_(build, workdir: Path, timeout_s=30.0):
    workdir.mkdir(exist_ok=True)
    return asyncio.run(compile_kernel_zip(build, XcrunCompiler(), workdir, timeout_s))


@pytest.mark.parametrize(("target", "version"), [("ios18", "18.0"), ("ios17", "17.0")])
def test_argv_names_ios_and_the_targets_deployment_version(stand_in, tmp_path, target, version):
    compile_(conv(target=target), tmp_path / "w")
    (start,) = [e for e in events(stand_in) if e["event"] == "start"]
    assert start["argv"] == [
        "coremlcompiler",
        "compile",
        "src/conv.mlpackage",
        "out",
        "--platform",
        "iOS",
        "--deployment-target",
        version,
    ]


def test_mlmodelc_zip_holds_the_compiled_dir_kernel_json_log_and_placement(stand_in, tmp_path):
    result = compile_(conv(name="k1"), tmp_path / "w")
    with zipfile.ZipFile(result.zip_path) as zf:
        names = set(zf.namelist())
        assert {
            "k1.mlmodelc/model.mil",
            "k1.mlmodelc/coremldata.bin",
            "k1.mlmodelc/weights/weight.bin",
            "k1.mlmodelc/metadata.json",
            "kernel.json",
            "compile.log",
            "placement.json",
        } <= names
        kernel = json.loads(zf.read("kernel.json"))
        log = zf.read("compile.log").decode()
        placement = json.loads(zf.read("placement.json"))
        assert b"STAND-IN" in zf.read("k1.mlmodelc/model.mil")
        weights = zf.read("k1.mlmodelc/weights/weight.bin")
    assert kernel["format"] == "mlmodelc" and kernel["op"] == "conv" and kernel["name"] == "k1"
    toolchain = kernel["compiler"]["toolchain"]
    assert kernel["compiler"]["backend"] == "xcrun"
    assert toolchain["macos_build"] == "24A335-STAND-IN"
    assert toolchain["xcode"].startswith("Xcode 16.0")
    assert "coremlcompiler version" in toolchain["coremlcompiler"]
    assert toolchain["coremltools"] == kernel["coremltools_version"]
    assert log.startswith("$ xcrun coremlcompiler compile src/k1.mlpackage out --platform iOS")
    assert placement["available"] is False and "macOS 14.4" in placement["reason"]
    # the weights travelled: 8x4 fp16 values plus the blob header
    assert len(weights) > 8 * 4 * 2
    assert result.description == kernel


def test_same_kernel_compiles_to_the_same_zip_bytes(stand_in, tmp_path):
    a = compile_(conv(), tmp_path / "a").zip_path.read_bytes()
    b = compile_(conv(), tmp_path / "b").zip_path.read_bytes()
    assert a == b


def test_compiler_failure_carries_the_compilers_own_message(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_XCRUN_FAIL", "bad")
    with pytest.raises(CompilerError) as err:
        compile_(conv(name="bad"), tmp_path / "w")
    assert "Failed to parse the model specification" in err.value.message
    assert "rejected bad" in err.value.message
    assert "compiling bad" in err.value.log  # stdout kept in the log
    assert not err.value.retryable


def test_timeout_names_the_limit_and_kills_the_compiler(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_XCRUN_SLEEP", "slow=60")
    with pytest.raises(CompileTimeout) as err:
        # long enough for the stand-in to start on a busy machine (xdist), far below its 60 s
        compile_(conv(name="slow"), tmp_path / "w", timeout_s=3)
    assert "ANE_COMPILE_TIMEOUT_S=3s" in err.value.message
    (start,) = [e for e in events(stand_in) if e["event"] == "start"]
    with pytest.raises(ProcessLookupError):
        os.kill(start["pid"], 0)  # gone and reaped, not left sleeping
    assert [e["event"] for e in events(stand_in)] == ["start"]


def test_a_compiler_killed_by_a_signal_is_retryable(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_XCRUN_CRASH", "conv=1")
    with pytest.raises(CompilerCrashed) as err:
        compile_(conv(), tmp_path / "a")
    assert err.value.retryable and "signal 9" in err.value.message
    compile_(conv(), tmp_path / "b")  # the stand-in crashes only once
    assert [e["event"] for e in events(stand_in)] == ["start", "crash", "start", "done"]


def test_selection_is_automatic_and_overridable(stand_in, monkeypatch):
    assert select_compiler().name == "xcrun"
    assert select_compiler("none") is None
    monkeypatch.setenv("ANE_COMPILER", "none")
    assert select_compiler() is None
    monkeypatch.setenv("ANE_COMPILER", "xcrun")
    assert select_compiler().name == "xcrun"
    with pytest.raises(ValueError, match="ANE_COMPILER='gcc'"):
        select_compiler("gcc")
    monkeypatch.delenv("ANE_COMPILER")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no xcrun, no Core ML on Linux
    if os.uname().sysname == "Linux":
        assert select_compiler().name == "linux"  # app/mlmodelc: any machine compiles
    assert select_compiler("linux", "3402.4.1").profile.coremlc_version == "3402.4.1"
    with pytest.raises(ValueError, match=r"ANE_MLMODELC_PROFILE='latest'"):
        select_compiler("linux", "latest")
    # a well-formed release never observed is written with the nearest observed one's rules
    assert select_compiler("linux", "9.9.9").profile.rules_of == "3402.4.1"
