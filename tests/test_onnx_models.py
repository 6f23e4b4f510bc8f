"""Real exports: transformers' BERT, ViT and Whisper encoder with small random weights, exported
by torch.onnx (tests/make_onnx_fixtures.py; versions in tests/fixtures/onnx/versions.json).
Each imports and verifies against onnxruntime, the preflight reporting no error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx_support import verify_onnx

from app.language.targets import get_target
from app.onnx.files import ModelFiles
from app.onnx.importer import import_onnx
from app.preflight import preflight
from app.request import OnnxParams

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "onnx"
VERSIONS = json.loads((FIXTURES / "versions.json").read_text())


def _import(name: str):
    path = FIXTURES / f"{name}.onnx"
    return import_onnx(
        OnnxParams(model=path.name),
        ModelFiles.in_folder(path),
        target=get_target("ios18"),
        name=name,
    )


def test_the_fixtures_are_small_and_recorded():
    for name, about in VERSIONS["models"].items():
        size = (FIXTURES / f"{name}.onnx").stat().st_size
        assert size == about["bytes"] and size <= 1 << 20
    assert VERSIONS["torch"] and VERSIONS["transformers"]


@pytest.mark.parametrize("name", ["vit", "whisper_encoder"])
def test_vision_and_speech_encoders_import_and_match_onnxruntime(name):
    build = _import(name)
    report = verify_onnx(build)
    out = report["outputs"]["last_hidden_state"]
    assert report["passed"], out
    assert out["max_rel_error"] < 0.01 and out["tolerance"] < 0.2
    ops = {op.type for op in build.program.main.operations}
    assert {"conv", "gelu", "softmax", "matmul", "rsqrt"} <= ops
    # constants broadcast at the rank of what they meet: the ANE compiler's rank-1 refusal
    # (broadcast.const-shape) does not fire; what remains are warnings and advice
    findings = preflight(build.program)
    assert [f.rule for f in findings if f.severity == "error"] == []
    # weights are listed under their initializers' names, each once
    assert any(key.startswith("model.") for key in build.weights)


def test_bert_imports_with_its_embedding_lookups_and_attention_mask():
    """The word, position and token-type lookups (tables of at most ONE_HOT_ROWS rows: one-hot
    products) and the attention mask (GatherND on known indices: a slice; Where: select) import,
    verify against onnxruntime, and leave the preflight no error."""
    from app.onnx.ops_index import ONE_HOT_ROWS

    build = _import("bert")
    report = verify_onnx(build)
    out = report["outputs"]["last_hidden_state"]
    assert report["passed"], out
    assert out["max_rel_error"] < 0.01
    ops = {op.type for op in build.program.main.operations}
    assert {"equal", "select", "gelu", "softmax"} <= ops and not ops & {"gather", "gather_nd"}
    assert VERSIONS["models"]["bert"]["opset"] == build.about["opset"]
    assert all(i.id_range is None or i.id_range <= ONE_HOT_ROWS for i in build.inputs)
    assert [f.rule for f in preflight(build.program) if f.severity == "error"] == []


def test_apples_core_ai_runtime_runs_the_imported_vit_as_onnxruntime_does(tmp_path):
    """--format aimodel --verify: Apple's runtime runs the .aimodel on the same inputs and is
    held to the same tolerance against onnxruntime."""
    from app.cli import main

    pytest.importorskip("coreai", reason="coreai-core (the `coreai` extra) runs .aimodel")
    out = tmp_path / "vit.zip"
    assert (
        main(
            ["onnx", str(FIXTURES / "vit.onnx"), "--format", "aimodel", "--verify", "-o", str(out)]
        )
        == 0
    )
    import zipfile

    report = json.loads(zipfile.ZipFile(out).read("verification.json"))
    assert report["apple_runtime"]["passed"] and report["agreement"]["both_passed"], report[
        "agreement"
    ]
