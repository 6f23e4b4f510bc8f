"""metadata.json's op names against every Apple-compiled histogram at hand (tests/fixtures/goldens),
the records' citations against the bundles they name, and unobserved names said in the report."""

import json
import zipfile
from pathlib import Path

import pytest
from mlmodelc_support import GOLDENS

from app.mil import ops
from app.mil.ops import sources
from app.mlmodelc import opnames
from app.mlmodelc.opnames import name_of

SPEC_OPSET = {6: "CoreML5", 7: "CoreML6", 8: "CoreML7", 9: "CoreML8"}
LEVEL_OPSET = {16: "CoreML6", 17: "CoreML7", 18: "CoreML8"}  # a program's iOS version
HISTOGRAMS = sorted(GOLDENS.rglob("metadata.json"))
# each citation of a bundle kept here -> its metadata.json, or (text-only bundles) its model.mil
CITED = {
    sources.SILERO_INT8: "silero-vad/unified_int8/unified_int8.mlmodelc/metadata.json",
    sources.SILERO_PALETTE: "silero-vad/unified_palette_4bit/unified_palette_4bit.mlmodelc/metadata.json",
    sources.SILERO_PRUNED: "silero-vad/unified_pruned_int8/unified_pruned_int8.mlmodelc/metadata.json",
    sources.ADD_MODEL: "coremltools-add_model/add_model.mlmodelc/metadata.json",
    sources.PARAKEET_ENCODER: "ios17-text/ParakeetEOU-160ms-streaming_encoder/metadata.json",
    sources.PARAKEET_PREPROCESSOR: "ios17-text/ParakeetEOU-parakeet_eou_preprocessor/metadata.json",
    sources.PARAKEET_DECODER: "ios17-text/ParakeetEOU-decoder/metadata.json",
    sources.PARAKEET_JOINT: "ios17-text/ParakeetEOU-joint_decision/metadata.json",
    sources.GATHER_3520: "apple-mil-text/coremlc-3520.5.1-flexible-gather.mil",
    sources.MULTIFUNCTION_3600: "apple-mil-text/coremlc-3600.25.1-flexible-multifunction.mil",
    sources.QUANTIZED_3600: "apple-mil-text/coremlc-3600.25.1-quantized-constexpr.mil",
}


# every op Apple's histogram was seen to name, with the record that says so
OBSERVED = {r.name: r.histogram for r in ops.records() if r.histogram}


def _metadata(path: Path) -> dict:
    data = json.loads(path.read_text())
    return data[0] if isinstance(data, list) else data


def test_the_ios17_histograms_are_among_the_goldens():
    assert sum("ios17-text" in str(p) for p in HISTOGRAMS) == 5


@pytest.mark.parametrize("path", HISTOGRAMS, ids=lambda p: p.parent.name)
def test_every_apple_histogram_name_is_an_observed_entry(path):
    """Each key Apple wrote is what the table gives for one op at the bundle's opset, and that
    entry is an observation (not the rule's guess)."""
    meta = _metadata(path)
    opset = SPEC_OPSET[meta["specificationVersion"]]
    names = {name_of(op, opset).name: name_of(op, opset) for op in OBSERVED}
    for key in meta["mlProgramOperationTypeHistogram"]:
        assert key in names, f"{key} ({path.parent.name}) is not in the table"
        assert names[key].observed, key


@pytest.mark.parametrize("op", sorted(OBSERVED))
def test_each_entry_is_in_the_bundle_it_cites(op):
    for level, (_, bundle) in OBSERVED[op].items():
        name = name_of(op, LEVEL_OPSET[level])
        assert name.observed and name.source == bundle
        if bundle not in CITED:  # bundles not kept here: their citation says so
            assert bundle in (sources.PUBLISHED, sources.ISSUE_25)
            continue
        cited = GOLDENS / CITED[bundle]
        if cited.suffix == ".mil":
            text = cited.read_text()
            assert f"<ios{level}>" in text and f" = {op}(" in text, (op, bundle)
        else:
            meta = _metadata(cited)
            assert SPEC_OPSET[meta["specificationVersion"]] == LEVEL_OPSET[level]
            assert name.name in meta["mlProgramOperationTypeHistogram"], (op, bundle)


def test_sub_and_softmax_in_an_ios16_program():
    """Apple's registry has iOS16 versions of both (coremltools has neither)."""
    assert name_of("sub", "CoreML6").name == "Ios16.sub"
    assert name_of("softmax", "CoreML6").name == "Ios16.softmax"
    assert name_of("sub", "CoreML7").name == "Ios17.sub"


def test_names_the_table_never_saw_are_marked():
    guessed = name_of("scaled_dot_product_attention", "CoreML8")
    assert guessed == opnames.OpName("Ios18.scaledDotProductAttention", False)
    assert not name_of("conv", "CoreML8").observed and name_of("conv", "CoreML7").observed
    assert name_of("relu", "CoreML8").observed
    assert name_of("anything_at_all", "CoreML5").observed  # iOS15: base versions only


@pytest.mark.parametrize(("target", "noted"), [("ios18", "Ios18.conv"), ("ios17", None)])
def test_the_build_report_lists_unobserved_names(tmp_path, capsys, target, noted):
    from app.cli import main

    out = tmp_path / "m.zip"
    code = main(
        [
            "compile",
            "conv",
            "--params",
            '{"in_channels": 32, "out_channels": 32, "spatial": 16}',
            "--random-weights",
            "0",
            "--format",
            "mlmodelc",
            "--target",
            target,
            "-o",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    with zipfile.ZipFile(out) as z:
        log = z.read("compile.log").decode()
        notes = json.loads(z.read("kernel.json"))["compiler"].get("notes", [])
    if noted is None:
        assert "never observed" not in log and notes == [] and "note:" not in printed
    else:
        assert "never observed in an Apple-compiled bundle" in log and noted in log
        assert len(notes) == 1 and noted in notes[0]
        assert f"note: {notes[0]}" in printed  # the build summary says it too
