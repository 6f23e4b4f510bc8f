"""Hostile bundles: a BLOBFILE path that leads outside the bundle (an absolute path after
`@model_path/`, `..`, a symlink) is refused by `ane-kernels decompile`, `ane-kernels mlmodelc`
with exit 2 (`validate`: "invalid", exit 1) and no traceback; nothing outside is copied in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlmodelc_support import SILERO, bundle_of

from app.language.paths import WEIGHT_PATH, model_relative

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

REPO = Path(__file__).resolve().parent.parent
SOURCE = SILERO[1] / "source.mlpackage"  # unified_int8: constexpr ops reading weight.bin
SPEC = "Data/com.apple.CoreML/model.mlmodel"
WEIGHT = "Data/com.apple.CoreML/weights/weight.bin"
SECRET = b"outside-the-bundle-" * 64


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def refused(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def copied(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for path in dst.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return dst


@pytest.fixture
def outside(tmp_path) -> Path:
    """A weight file outside every bundle, a copy of the real one (so only its place is wrong)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    target = folder / "weight.bin"
    target.write_bytes((SOURCE / WEIGHT).read_bytes())
    return target


def bundle_pointing_at(tmp_path: Path, path: str) -> Path:
    bundle = copied(bundle_of(SILERO[1]), tmp_path / "in.mlmodelc")
    mil = bundle / "model.mil"
    mil.write_text(mil.read_text().replace(WEIGHT_PATH, path))
    return bundle


def package_pointing_at(tmp_path: Path, path: str) -> Path:
    from app.language.messages import Model_pb2

    package = copied(SOURCE, tmp_path / "src.mlpackage")
    spec = package / SPEC
    model = Model_pb2.Model()
    model.ParseFromString(spec.read_bytes())
    assert _rewrite(model, path) > 0
    spec.write_bytes(model.SerializeToString())
    return package


def _rewrite(message, path: str) -> int:
    """Point every BLOBFILE value in `message` at `path`; how many were changed."""
    count = 0
    for descriptor, value in message.ListFields():
        if descriptor.name == "blobFileValue":
            value.fileName = path
            count += 1
            continue
        if descriptor.type != descriptor.TYPE_MESSAGE:
            continue
        if hasattr(value, "ListFields"):
            items = [value]
        elif hasattr(value, "values"):  # a map
            items = list(value.values())
        else:  # a repeated field
            items = list(value)
        for item in items:
            if hasattr(item, "ListFields"):
                count += _rewrite(item, path)
    return count


# (command, BLOBFILE path): the bundle's model.mil for decompile, the package's spec for mlmodelc
ESCAPES = [
    ("decompile", "@model_path/{abs}"),
    ("decompile", "@model_path/../elsewhere/weight.bin"),
    ("decompile", "@model_path/weights/./weight.bin"),
    ("mlmodelc", "@model_path/{abs}"),
    ("mlmodelc", "@model_path/../../elsewhere/weight.bin"),
]


@pytest.mark.parametrize(("command", "spelled"), ESCAPES)
def test_paths_outside_the_bundle_are_refused(tmp_path, outside, command, spelled):
    path = spelled.format(abs=outside)
    if command == "decompile":
        source, out = bundle_pointing_at(tmp_path, path), tmp_path / "out.mlpackage"
    else:
        source, out = package_pointing_at(tmp_path, path), tmp_path / "out.mlmodelc"
    refused(cli(command, source, "-o", out), "must name a file inside the model's folder")
    assert not out.exists()


def test_decompile_refuses_a_symlink_leading_outside(tmp_path, outside):
    bundle = copied(bundle_of(SILERO[1]), tmp_path / "in.mlmodelc")
    (bundle / "weights" / "weight.bin").unlink()
    os.symlink(outside, bundle / "weights" / "weight.bin")
    out = tmp_path / "out.mlpackage"
    refused(cli("decompile", bundle, "-o", out), "outside")
    assert not out.exists()
    # A symlinked folder is the same escape one level up.
    shutil.rmtree(bundle / "weights")
    os.symlink(outside.parent, bundle / "weights")
    refused(cli("decompile", bundle, "-o", out), "outside")
    # Validating the bundle (the path that reads bundles for a build farm) finds it invalid
    # (its exit status for an invalid artifact is 1) for the same reason.
    result = cli("validate", bundle)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("invalid:") and "outside" in result.stderr


def test_a_symlink_inside_the_bundle_is_followed(tmp_path):
    bundle = copied(bundle_of(SILERO[1]), tmp_path / "in.mlmodelc")
    (bundle / "weights" / "weight.bin").rename(bundle / "real.bin")
    os.symlink(bundle / "real.bin", bundle / "weights" / "weight.bin")
    out = tmp_path / "out.mlpackage"
    result = cli("decompile", bundle, "-o", out)
    assert result.returncode == 0, result.stderr
    assert (out / WEIGHT).read_bytes() == (bundle / "real.bin").read_bytes()


def test_mlmodelc_refuses_a_weights_dir_symlink_leading_outside(tmp_path, outside):
    spec = tmp_path / "model.mlmodel"
    shutil.copyfile(SOURCE / SPEC, spec)
    weights = tmp_path / "w"
    weights.mkdir()
    os.symlink(outside, weights / "weight.bin")
    out = tmp_path / "out.mlmodelc"
    refused(cli("mlmodelc", spec, "-o", out, "--weights-dir", weights), "outside")
    assert not out.exists()


@pytest.mark.parametrize(
    "path",
    [
        "@model_path//etc/passwd",
        "@model_path/../x",
        "@model_path/a/../../x",
        "@model_path/",
        "@model_path/a//b",
        "@model_path/a\\..\\b",
        "weights/weight.bin",
        "@model_path/./x",
    ],
)
def test_the_model_path_rule_as_text(path):
    with pytest.raises(ValueError, match="BLOBFILE path"):
        model_relative(path)


def test_plain_paths_pass_the_rule():
    assert model_relative(WEIGHT_PATH) == "weights/weight.bin"
    assert model_relative("@model_path/a/b.c..d") == "a/b.c..d"


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        (
            "tensor<fp32, [1, 576]> audio_input",
            "tensor<fp32, [1, 99999999999999999999]> audio_input",
            "is past 9223372036854775807",
        ),
        (
            "tensor<int32, [4]>([0, 0, 0, 64])",
            "tensor<int32, [4]>([0, 0, 0, 4294967360])",
            "4294967360 is outside int32",
        ),
        (
            "offset = tensor<uint64, []>(64)",
            "offset = tensor<uint64, []>(18446744073709551616)",
            "is outside uint64",
        ),
    ],
    ids=["dimension past int64", "int32 value past int32", "offset past uint64"],
)
def test_decompile_checks_values_against_their_types(tmp_path, old, new, words):
    bundle = copied(bundle_of(SILERO[1]), tmp_path / "in.mlmodelc")
    mil = bundle / "model.mil"
    text = mil.read_text()
    assert old in text
    mil.write_text(text.replace(old, new, 1))
    out = tmp_path / "out.mlpackage"
    refused(cli("decompile", bundle, "-o", out), words)
    assert not out.exists()
