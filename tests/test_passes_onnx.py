"""ONNX imports through the graph passes: "none" gives an import's key and bytes as they were
before passes existed, the default pipeline runs on the imported program (in the key, in
kernel.json, one CLI line) and the import still verifies against onnxruntime; every edge that
takes an import takes `passes` (the request, its job record, `ane-kernels onnx --passes`, farm
manifests; HTTP and the client are in tests/test_api_onnx.py)."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from app import artifacts
from app.errors import RequestError
from app.farm.manifest import ManifestError, load_manifest
from app.passes.pipelines import VERSION
from app.request import KernelRequest, WeightRef

# What the default leaves out for the raw mil bundle: the passes that write gelu or layer_norm.
LEFT_OUT_FOR_MIL = (
    "fuse_gelu_exact",
    "fuse_gelu_tanh_approximation",
    "fuse_layernorm_or_instancenorm",
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "onnx"

# Each fixture imported on main at 75f6deb, before imports went through passes (name "golden",
# no other option): its key and its zip's sha256 then. "none" must give exactly these (they hold
# the generator's, coremltools' and the importer's versions: a bump of one changes them).
BEFORE_PASSES = {
    ("vit", "mil"): (
        "b7f2be441246cc414c5a17754decb48bbdc9e06eb166adba79c9a4c6e2ce827b",
        "1d2a325747f3daa867f54fc65f20fe171ae6c44a541731b78980448079d1e014",
    ),
    ("vit", "mlpackage"): (
        "ff53c2bb60d0c53fba871ceaff8f119b1dd4911ecec899043b304ed4bf4b03c3",
        "f23825f0aea075162133842fb4112aa9d2ce56574f3c6c0c9aee7e39583879fd",
    ),
    ("whisper_encoder", "mil"): (
        "4825af6dfe7d16f42011a86fc641f484f441dea81a6b3e3174f12aa24ec66b60",
        "7b7a4b4c274a4d1a54834cacf4750d2a9ab255470d1edeb2c90d75ce0539c39a",
    ),
    ("whisper_encoder", "mlpackage"): (
        "8e3e3a88d9ad2a3f912fb5dafd87c3d3417bfdf63621fe0ed903450b72b8bc1d",
        "0be86e3ad73e31dbf0073060ec42c78a5db2f01d4d628b804eefa8944a0be8d5",
    ),
}

# What the default pipeline leaves of each fixture's ops (consts aside), what it removed and what
# it added, per format. The fixtures hold transformers' freshly initialized weights: every Linear
# and LayerNorm bias is zeros and every LayerNorm scale ones, so noop_elimination removes each add
# of a bias and each mul by a scale (a trained model's are not, and stay). For the Core ML
# formats each of the five LayerNorms, imported as mean/sub/mul/mean/add/rsqrt/mul, becomes one
# layer_norm; the raw mil bundle keeps them spelt out (layer_norm is reported failing on
# ANE-direct runtimes: docs/passes.md).
_PLAIN = {
    "vit": (106, 82, {"add": 19, "mul": 5}, {}),
    "whisper_encoder": (103, 83, {"add": 15, "mul": 5}, {}),
}
_NORMS = {"reduce_mean": 10, "sub": 5, "mul": 15, "rsqrt": 5}
DEFAULT_OPS = {
    ("vit", "mil"): _PLAIN["vit"],
    ("vit", "mlpackage"): (106, 52, {**_NORMS, "add": 24}, {"layer_norm": 5}),
    ("whisper_encoder", "mil"): _PLAIN["whisper_encoder"],
    ("whisper_encoder", "mlpackage"): (103, 53, {**_NORMS, "add": 20}, {"layer_norm": 5}),
}


def _request(model: str, fmt: str, **kw) -> KernelRequest:
    path = FIXTURES / f"{model}.onnx"
    return KernelRequest.create(
        onnx={"model": path.name},
        weights={path.name: WeightRef.of_file(path)},
        format=fmt,
        name="golden",
        **kw,
    )


def _ops(program) -> Counter:
    return Counter(op.type for op in program.main.operations if op.type != "const")


@pytest.mark.parametrize(("model", "fmt"), list(BEFORE_PASSES))
def test_none_gives_the_key_and_bytes_an_import_had_before_passes(model, fmt):
    key, digest = BEFORE_PASSES[model, fmt]
    request = _request(model, fmt, passes="none")
    assert request.key == key
    assert hashlib.sha256(artifacts.zip_bytes(artifacts.prepare(request))).hexdigest() == digest


@pytest.mark.parametrize(("model", "fmt"), list(DEFAULT_OPS))
def test_the_default_pipeline_runs_on_an_import_and_it_still_verifies(model, fmt):
    before, after, removed, added = DEFAULT_OPS[model, fmt]
    request = _request(model, fmt, verify=True)
    assert request.key != BEFORE_PASSES[model, fmt][0]
    prepared = artifacts.prepare(request)
    assert prepared.verified, prepared.verification["outputs"]
    build = prepared.build
    as_built, now = _ops(build.built_program), _ops(build.program)
    assert (sum(as_built.values()), sum(now.values())) == (before, after)
    assert dict(as_built - now) == removed and dict(now - as_built) == added
    # the interface is the import's: names, shapes and dtypes of inputs and outputs
    plain = _request(model, fmt, passes="none").build()
    assert build.signature() == plain.signature()
    assert build.describe() == plain.describe()  # kernel.json's onnx section
    # every op noop_elimination removed computed with a constant of zeros (add) or ones (mul)
    ops = {op.name: op for op in build.built_program.main.operations}
    report = build.passes.to_json()
    for change in report["changes"]:
        if change["pass"] != "noop_elimination":
            continue
        for op_type, names in change["removed"].items():
            for name in names if op_type in ("add", "mul") else ():
                constant = next(
                    v.op.value.stored()
                    for v in ops[name].inputs.values()
                    if v.op is not None and v.op.type == "const"
                )
                assert np.all(constant == (0 if op_type == "add" else 1)), name
    passes = {c["pass"] for c in report["changes"]}
    fused = {"fuse_layernorm_or_instancenorm"} if added else set()
    assert passes == {"noop_elimination", "topological_reorder"} | fused
    with zipfile.ZipFile(io.BytesIO(artifacts.zip_bytes(prepared))) as zf:
        kernel = json.loads(zf.read("kernel.json"))
    assert kernel["passes"] == report
    assert kernel["passes"]["pipeline"] == "default"


def test_the_key_names_the_pipeline_and_the_job_record_keeps_it():
    default = _request("vit", "mlpackage")
    assert default._key_doc["passes"] == {"pipeline": "default", "version": VERSION}
    # for the raw mil bundle the default leaves out what writes an op reported failing there
    assert _request("vit", "mil")._key_doc["passes"]["left_out"] == list(LEFT_OUT_FOR_MIL)
    assert "passes" not in _request("vit", "mil", passes="none")._key_doc
    for passes in (None, "none", "fuse-all", ["noop_elimination", "dead_code_elimination"]):
        request = _request("vit", "mil", passes=passes)
        again = KernelRequest.from_json(request.to_json())
        assert again.passes == request.passes and again.key == request.key
    record = _request("vit", "mil").to_json()
    del record["passes"]  # written before imports went through passes: imported as written
    assert KernelRequest.from_json(record).key == BEFORE_PASSES["vit", "mil"][0]


@pytest.mark.parametrize(
    ("passes", "field"),
    [("fastest", "passes"), (["noop_elimination", "nope"], "passes[1]"), (7, "passes")],
)
def test_a_bad_choice_for_an_import_is_refused_naming_its_field(passes, field):
    with pytest.raises(RequestError) as caught:
        _request("vit", "mil", passes=passes)
    assert caught.value.field == field


def test_the_onnx_command_takes_passes_and_prints_one_line_of_them(tmp_path, capsys):
    from app.cli import main

    model = str(FIXTURES / "whisper_encoder.onnx")
    common = ["--format", "mil", "--name", "golden"]
    assert main(["onnx", model, *common, "-o", str(tmp_path / "d.zip")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("passes"))
    assert line.startswith("passes default: 180 ops -> 157 (noop_elimination -23")
    plain = tmp_path / "n.zip"
    assert main(["onnx", model, *common, "--passes", "none", "-o", str(plain)]) == 0
    assert "passes" not in capsys.readouterr().out
    digest = BEFORE_PASSES["whisper_encoder", "mil"][1]
    assert hashlib.sha256(plain.read_bytes()).hexdigest() == digest
    bad = tmp_path / "b.zip"
    assert main(["onnx", model, *common, "--passes", "fastest", "-o", str(bad)]) == 2
    assert "passes" in capsys.readouterr().err and not bad.exists()


def _manifest(tmp_path: Path, entry: str) -> Path:
    (tmp_path / "vit.onnx").write_bytes((FIXTURES / "vit.onnx").read_bytes())
    path = tmp_path / "farm.toml"
    path.write_text(f'[kernels.golden]\nonnx = "vit.onnx"\nformat = "mil"\n{entry}\n')
    return path


def test_a_farm_manifests_onnx_entry_takes_passes(tmp_path):
    (plain,) = load_manifest(_manifest(tmp_path, 'passes = "none"'))
    assert plain.request_key == BEFORE_PASSES["vit", "mil"][0]
    assert plain.inputs["passes"] == "none"
    (default,) = load_manifest(_manifest(tmp_path, ""))
    assert "passes" not in default.inputs  # a lock written before passes stays valid
    assert default.request_key == _request("vit", "mil").key
    with pytest.raises(ManifestError, match=r"kernels\.golden\.passes\[0\]"):
        load_manifest(_manifest(tmp_path, 'passes = ["nope"]'))
    graph = tmp_path / "op.toml"
    graph.write_text(
        '[kernels.c]\nop = "conv"\nparams = { in_channels = 4, out_channels = 4, spatial = 2 }\n'
        'passes = "none"\n'
    )
    with pytest.raises(ManifestError, match="passes are options of an onnx entry"):
        load_manifest(graph)
