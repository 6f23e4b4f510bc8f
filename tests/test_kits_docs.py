"""docs/kits.md's Python loop, run as written on a kit of each KV mode: it reads nothing but the
kit and generates the tokens `Kit.generate` does."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest
from kit_support import KIT_QWEN2, write_model

from app.kits import Kit, KitOptions, build_kit

DOC = Path(__file__).resolve().parents[1] / "docs" / "kits.md"


def python_loop() -> str:
    """The code block under "### In Python (run by the tests)"."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### In Python (run by the tests)") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize(("fmt", "kv"), [("mlmodelc", "io"), ("mlpackage", "state")])
def test_the_documented_loop_generates_what_the_runner_does(tmp_path, monkeypatch, fmt, kv):
    folder = write_model(tmp_path / "qwen2", KIT_QWEN2, seed=7)
    build_kit(folder, tmp_path / "model.kit.zip", KitOptions(format=fmt, kv=kv, context=16,
                                                            prefill=4))  # fmt: skip
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(python_loop(), str(DOC), "exec"), {})
    tokens = ast.literal_eval(printed.getvalue().strip())
    expected, _ = Kit.open(tmp_path / "model.kit.zip").generate([5, 17, 3, 250, 9, 1], 5)
    assert tokens == expected
