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
