"""Kits at the sizes where size changes the code path: a decoder program whose model.mil (an
mlpackage's model.mlmodel) passes 1 MiB, built in every format with --verify and run with
`generate`, from the command line.

Twenty narrow layers (hidden 32) give a 1.19 MB model.mil at the cost of a tiny model: the
text grows with the layer count, not the width (Qwen3-0.6B's 28 layers give 1.69 MB). At 1 MiB
(`kitzip.MAPPED_BYTES`) a stored zip entry is read back as a memory map's view rather than
bytes; an .mlmodelc kit stores its bundle's files, so its decoder's model.mil is read mapped by
--verify and by `generate`. Below that size every kit of the suite took the other path.
"""

from __future__ import annotations

import zipfile

import pytest
from kit_support import KIT_QWEN3, write_model

from app.cli import main
from app.core.formats import KIT_FORMATS
from app.kits.kitzip import MAPPED_BYTES

pytestmark = pytest.mark.slow
LAYERS = 20  # ~60 KB of model.mil text per layer: 20 layers cross MAPPED_BYTES (1 MiB)
FLAGS = ["--context", "16", "--prefill", "4"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    config = KIT_QWEN3 | {"num_hidden_layers": LAYERS}
    return write_model(tmp_path_factory.mktemp("wide-text") / "qwen3-20", config, seed=2)


@pytest.mark.parametrize("fmt", KIT_FORMATS)
def test_a_kit_past_1_mib_of_program_text_verifies_and_generates(fmt, folder, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    kit = out / "kit.zip"
    code = main(["model", str(folder), "-o", str(kit), "--format", fmt, *FLAGS, "--verify"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "verify: passed" in printed.out
    assert list(out.iterdir()) == [kit]  # nothing else written beside it
    with zipfile.ZipFile(kit) as zf:
        texts = [i for i in zf.infolist() if i.filename.endswith(("model.mil", "model.mlmodel"))]
    largest = max(texts, key=lambda i: i.file_size)
    assert largest.file_size >= MAPPED_BYTES  # the size this file is about
    if fmt == "mlmodelc":  # stored, so read back mapped: the path that broke
        assert largest.compress_type == zipfile.ZIP_STORED

    code = main(["generate", str(kit), "--prompt-ids", "5,17,3", "--max-new-tokens", "3"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    tokens = printed.out.split()
    assert 1 <= len(tokens) <= 3 and all(t.isdigit() for t in tokens)
