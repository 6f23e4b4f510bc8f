"""docs/kits.md's Python loop, run as written on a kit of each KV mode: it reads nothing but the
kit and generates the tokens `Kit.generate` does."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
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
    kit = tmp_path / "qwen3.kit.zip"  # the file the page's loop reads; a Qwen2 kit works alike
    build_kit(folder, kit, KitOptions(format=fmt, kv=kv, context=16, prefill=4))
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(python_loop(), str(DOC), "exec"), {})
    tokens = ast.literal_eval(printed.getvalue().strip())
    expected, _ = Kit.open(kit).generate([5, 17, 3, 250, 9, 1], 5)
    assert tokens == expected


def _block(heading: str, lang: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return re.search(rf"```{lang}\n(.*?)```", text[text.index(heading) :], re.S).group(1)


@pytest.mark.slow
def test_the_documented_commands_and_api_run(tmp_path, monkeypatch, capsys):
    """The page's first commands and Python, in a folder holding a small random `Qwen3-0.6B`
    (Qwen3's own max_position_embeddings, so the documented context fits)."""
    from kit_support import KIT_QWEN3

    from app.cli import main

    write_model(tmp_path / "Qwen3-0.6B", KIT_QWEN3 | {"max_position_embeddings": 40960}, seed=3)
    monkeypatch.chdir(tmp_path)
    for line in _block("# Model kits", "sh").splitlines():
        if line.startswith("ane-kernels "):
            assert main(shlex.split(line)[1:]) == 0, line
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(printed["tokens"]) == len(printed["logits"]) >= 1
    namespace: dict = {}
    exec(compile(_block("From Python", "python"), str(DOC), "exec"), namespace)
    # the command stops at an eos id (special_tokens); Kit.generate stops only where told to
    assert printed["tokens"] == namespace["tokens"][: len(printed["tokens"])]
    assert namespace["data"][:2] == b"PK"
