"""Hostile ONNX files over the command line: each refused with exit 2 and a message naming the
file, node or tensor; nothing written (no zip, nothing left in $TMPDIR)."""

from __future__ import annotations

import subprocess
import sys

from onnx_hostile import HOSTILE, weights_over

from app.cli import main


def test_every_hostile_file_is_refused_with_exit_2(tmp_path, tmpdir_env, capsys):
    failures = {}
    for name, make in HOSTILE.items():
        folder = tmp_path / name / "model"
        folder.mkdir(parents=True)
        model, fragment, _ = make(folder)
        out = tmp_path / name / "out.zip"
        code = main(["onnx", str(folder / model), "-o", str(out), "--verify"])
        err = capsys.readouterr().err
        if code != 2 or fragment not in err or "Traceback" in err or out.exists():
            failures[name] = (code, err.strip()[:400])
    assert not failures, failures
    assert list(tmpdir_env.iterdir()) == []


def test_a_model_over_the_program_budget_is_refused_before_its_weights_are_read(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    model = weights_over(folder, 4000)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "onnx",
            str(folder / model),
            "-o",
            str(tmp_path / "o.zip"),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "ANE_MAX_PROGRAM_WEIGHT_BYTES": "2000"},
    )
    assert done.returncode == 2, done.stderr
    assert "over the limit of 2000 bytes per program" in done.stderr
    assert not (tmp_path / "o.zip").exists()
