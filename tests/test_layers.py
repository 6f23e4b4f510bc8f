"""The layer order (pyproject.toml, [tool.importlinter]): checked by import-linter on every run,
and covering every module of the app, so a new one cannot sit outside the order."""

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-logo", "--no-cache"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and "0 broken" in done.stdout


def test_every_module_has_a_place_in_the_layers():
    layered = {
        name.strip()
        for layer in _contracts()["layers"]["layers"]
        for name in layer.replace(":", "|").split("|")
    }
    modules = {
        f"app.{p.stem if p.is_file() else p.name}"
        for p in (REPO / "app").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert modules == layered, f"unplaced: {modules - layered}, gone: {layered - modules}"
