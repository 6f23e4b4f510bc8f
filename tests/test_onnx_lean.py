"""A large embedded model is parsed without its weights' bytes (app/onnx/wire.py): the import
reads each initializer by offset from the model file, and gives what a whole parse gives; a
file the lean reader does not understand is parsed whole and refused as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.errors import RequestError
from app.onnx import reader
from app.onnx.files import ModelFiles
from app.onnx.reader import read_model
from app.onnx.wire import lean_model

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "onnx"


@pytest.mark.parametrize("name", ["bert", "vit", "whisper_encoder"])
def test_the_lean_parse_reads_the_same_weights(name, monkeypatch):
    path = FIXTURES / f"{name}.onnx"
    whole = read_model(ModelFiles.in_folder(path))
    assert whole.embedded == {}
    monkeypatch.setattr(reader, "LEAN_MIN_BYTES", 0)
    lean = read_model(ModelFiles.in_folder(path))
    assert lean.embedded and set(lean.embedded) <= set(lean.initializers)
    assert all(not t.raw_data for t in lean.proto.graph.initializer)
    assert [n.SerializeToString() for n in lean.nodes] == [
        n.SerializeToString() for n in whole.nodes
    ]
    for key in whole.initializers:
        a, b = whole.value(key), lean.value(key)
        assert a.dtype == b.dtype and np.array_equal(a, b), key


def test_a_truncated_file_is_refused_as_before(tmp_path, monkeypatch):
    data = (FIXTURES / "vit.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    assert lean_model(cut, cut.stat().st_size) is None
    monkeypatch.setattr(reader, "LEAN_MIN_BYTES", 0)
    with pytest.raises(RequestError, match="not an ONNX model"):
        read_model(ModelFiles.in_folder(cut))


def test_a_local_import_never_hashes_the_model_file_and_a_lazy_digest_is_the_files(
    tmp_path, monkeypatch
):
    """The command line keys no cache: the model file (hundreds of megabytes for a real model)
    is not hashed, and the zip is what it was; a digest asked for is the file's sha256."""
    import hashlib

    from app import request as request_module
    from app.cli import main
    from app.request import WeightRef

    model = FIXTURES / "vit.onnx"
    hashed = []
    real = request_module.file_digest
    monkeypatch.setattr(request_module, "file_digest", lambda *a: hashed.append(a) or real(*a))
    assert main(["onnx", str(model), "-o", str(tmp_path / "lazy.zip"), "--format", "mil"]) == 0
    assert hashed == []
    monkeypatch.undo()
    lazy, eager = WeightRef.of_file(model, lazy=True), WeightRef.of_file(model)
    assert lazy.given_digest is None and lazy.file is not None and lazy.file.digest == ""
    assert lazy.digest == eager.digest == "sha256:" + hashlib.sha256(model.read_bytes()).hexdigest()
    assert lazy.key_part == eager.key_part
