"""Bad input: a specific error naming the file / op at fault, and nothing half-written."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from mlmodelc_support import SILERO, bundle_of

from app.language.errors import (
    BadBundleError,
    BadPackageError,
    MilSyntaxError,
    UnknownProfileError,
    WeightFileError,
)
from app.language.profiles import DEFAULT_PROFILE, get_profile
from app.mlmodelc import compile_package, decompile

SOURCE = SILERO[1] / "source.mlpackage"  # unified_int8: 7 constexpr ops reading weight.bin
SPEC = "Data/com.apple.CoreML/model.mlmodel"
WEIGHT = "Data/com.apple.CoreML/weights/weight.bin"


@pytest.fixture
def package(tmp_path) -> Path:
    copy = tmp_path / "src.mlpackage"
    shutil.copytree(SOURCE, copy)
    for path in copy.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return copy


def leaves_nothing(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def fails(package: Path, out: Path, error: type, *words: str) -> Exception:
    with pytest.raises(error) as info:
        compile_package(package, out)
    for word in words:
        assert word in str(info.value)
    leaves_nothing(out)
    return info.value


def test_unparsable_protobuf(package, tmp_path):
    (package / SPEC).write_bytes(b"\xff\xff\xff not a protobuf")
    err = fails(package, tmp_path / "out.mlmodelc", BadPackageError, "not a Core ML model protobuf")
    assert err.where.endswith("model.mlmodel")


def test_not_an_ml_program(package, tmp_path):
    from coremltools.proto import Model_pb2

    nn = Model_pb2.Model()
    nn.specificationVersion = 4
    nn.neuralNetwork.SetInParent()
    (package / SPEC).write_bytes(nn.SerializeToString())
    fails(package, tmp_path / "out.mlmodelc", BadPackageError, "not an ML Program", "neuralNetwork")


def test_missing_spec_file(package, tmp_path):
    (package / SPEC).unlink()
    fails(package, tmp_path / "out.mlmodelc", BadPackageError, "root model", "missing")


def test_weights_referenced_but_absent(package, tmp_path):
    shutil.rmtree(package / "Data/com.apple.CoreML/weights")
    err = fails(
        package,
        tmp_path / "out.mlmodelc",
        WeightFileError,
        "weights/weight.bin",
        "does not contain",
    )
    assert "function main" in err.where and "op constexpr_" in err.where


def test_blobfile_offset_past_the_end(package, tmp_path):
    weight = package / WEIGHT
    weight.write_bytes(weight.read_bytes()[:1000])
    err = fails(package, tmp_path / "out.mlmodelc", WeightFileError, "past the end")
    assert "op " in err.where


def test_blobfile_offset_not_at_an_entry(package, tmp_path):
    weight = package / WEIGHT
    data = bytearray(weight.read_bytes())
    struct.pack_into("<I", data, 64, 0x12345678)  # the first entry's sentinel
    weight.write_bytes(bytes(data))
    fails(
        package,
        tmp_path / "out.mlmodelc",
        WeightFileError,
        "no blob entry at offset 64",
        "0x12345678",
    )


def test_profiles_take_every_observed_pair_and_the_nearest_rules_for_the_rest():
    assert get_profile() is DEFAULT_PROFILE
    assert get_profile(mil_version="3402.3.2").coremlc_version == "3402.4.1"
    # one release, two MIL components seen in the wild: both observed
    wild = get_profile("3500.32.1", "3510.2.1")
    assert (wild.mil_version, wild.observed) == ("3510.2.1", True)
    assert wild.build_info()["coremlc-component-MIL"] == "3510.2.1"
    # a release between observed ones: its own strings, the earlier observed release's rules
    between = get_profile("3505.4.1", "3510.2.1")
    assert (between.coremlc_version, between.mil_version) == ("3505.4.1", "3510.2.1")
    assert between.rules_of == "3500.32.1" and not between.writes_flexible_shape_info
    assert "layout rules of 3500.32.1: not observed" in between.describe()
    later = get_profile("9999.1.1")
    assert later.rules_of == "3600.25.1" and later.writes_flexible_shape_info
    # a known release with a component never seen with it: kept, said so
    odd = get_profile("3500.32.1", "3402.3.2")
    assert odd.mil_version == "3402.3.2" and odd.rules_of == "3500.32.1"
    with pytest.raises(UnknownProfileError, match="not a release number"):
        get_profile("latest")


@pytest.mark.parametrize("release", ["3404.23.1", "3403.1"])
def test_no_release_but_3402s_published_files_ends_its_texts_with_a_newline(release, tmp_path):
    """3404.23.1 is observed (MIL 3405.2.1, program(1.0), spec 7) writing model.mil and
    metadata.json without a final newline; 3403.1, never seen, sits between it and 3402.4.1 and
    takes 3402's layout rules, but not the newline its published files carry."""
    out = compile_package(SOURCE, tmp_path / "out.mlmodelc", release)
    profile = get_profile(release)
    assert profile.observed == (release == "3404.23.1")
    if release == "3404.23.1":
        assert profile.mil_version == "3405.2.1"
    else:
        assert profile.rules_of == "3402.4.1"
    text = (out.path / "model.mil").read_text(encoding="utf-8")
    assert text.startswith("program(1.0)\n") and f'"coremlc-version", "{release}"' in text
    for name in ("model.mil", "metadata.json"):
        assert not (out.path / name).read_bytes().endswith(b"\n"), name
    published = compile_package(SOURCE, tmp_path / "published.mlmodelc", "3402.4.1")
    assert (published.path / "model.mil").read_bytes().endswith(b"\n")  # as coremltools has it


def test_unknown_profile_by_name_writes_nothing(tmp_path):
    out = tmp_path / "out.mlmodelc"
    with pytest.raises(UnknownProfileError, match="not-a-release"):
        compile_package(SOURCE, out, "not-a-release")
    leaves_nothing(out)
    assert compile_package(SOURCE, out, "3402.4.1").profile.mil_version == "3402.3.2"


def test_existing_bundle_replaced_only_when_the_new_one_is_complete(package, tmp_path):
    out = tmp_path / "out.mlmodelc"
    compile_package(SOURCE, out)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (package / WEIGHT).unlink()
    with pytest.raises(WeightFileError):
        compile_package(package, out)
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def bundle_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "in.mlmodelc"
    shutil.copytree(bundle_of(SILERO[1]), copy)
    for path in copy.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return copy


def test_decompile_bad_text_names_line_and_column(tmp_path):
    bundle = bundle_copy(tmp_path)
    lines = (bundle / "model.mil").read_text().splitlines()
    lines[5] = lines[5].replace("const()[", "const()(", 1)
    (bundle / "model.mil").write_text("\n".join(lines))
    out = tmp_path / "out.mlpackage"
    with pytest.raises(MilSyntaxError) as info:
        decompile(bundle, out)
    assert info.value.line == 6 and info.value.column == lines[5].index("const()(") + 8
    leaves_nothing(out)


@pytest.mark.parametrize(
    ("damage", "error", "words"),
    [
        (lambda b: (b / "coremldata.bin").write_bytes(b"\x00" * 200), BadBundleError, "bad magic"),
        (lambda b: (b / "coremldata.bin").unlink(), BadBundleError, "missing coremldata.bin"),
        (lambda b: (b / "weights/weight.bin").unlink(), WeightFileError, "does not contain"),
    ],
    ids=["coremldata-corrupt", "coremldata-missing", "weights-missing"],
)
def test_decompile_bad_bundle(tmp_path, damage, error, words):
    bundle = bundle_copy(tmp_path)
    damage(bundle)
    out = tmp_path / "out.mlpackage"
    with pytest.raises(error, match=words):
        decompile(bundle, out)
    leaves_nothing(out)


def test_decompile_needs_a_bundle(tmp_path):
    with pytest.raises(BadBundleError, match="no such bundle"):
        decompile(tmp_path / "nothing.mlmodelc", tmp_path / "out.mlpackage")
    with pytest.raises(BadPackageError, match="no such package"):
        compile_package(tmp_path / "nothing.mlpackage", tmp_path / "out.mlmodelc")


def test_mlmodel_with_weights_directory(tmp_path):
    """The `.mlmodel` + weights form: the directory stands for `@model_path/weights`."""
    spec = tmp_path / "model.mlmodel"
    shutil.copyfile(SOURCE / SPEC, spec)
    weights = tmp_path / "w"
    weights.mkdir()
    shutil.copyfile(SOURCE / WEIGHT, weights / "weight.bin")
    out = compile_package(spec, tmp_path / "unified_int8.mlmodelc", weights_dir=weights).path
    golden = bundle_of(SILERO[1])
    for name in ("model.mil", "metadata.json", "weights/weight.bin", "analytics/coremldata.bin"):
        assert (out / name).read_bytes() == (golden / name).read_bytes(), name
    with pytest.raises(WeightFileError, match="does not contain"):
        compile_package(spec, tmp_path / "again.mlmodelc")
