"""The layer order (pyproject.toml, [tool.importlinter]): checked by import-linter on every run,
and covering every module of the app, so a new one cannot sit outside the order."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


@pytest.mark.slow
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


def _listed_modules() -> list[str]:
    """The modules docs/architecture.md lists under "Layers", in the page's order."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    listing = page.split("## Layers", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    paths = re.findall(r"^((?:app/\w+(?:\.py|/)\s*)+)", listing, re.M)
    return [
        "app." + p.removesuffix("/").removesuffix(".py").removeprefix("app/")
        for group in paths
        for p in group.split()
    ]


def test_the_architecture_page_lists_every_module_in_the_layer_order():
    """docs/architecture.md's listing follows the layers contract: each module once, none
    missing, none listed above a module of a higher layer."""
    layer_of = {
        name.strip(): i
        for i, layer in enumerate(_contracts()["layers"]["layers"])
        for name in layer.replace(":", "|").split("|")
    }
    listed = _listed_modules()
    assert sorted(listed) == sorted(layer_of), (
        f"not on the page: {set(layer_of) - set(listed)}, not in the contract: "
        f"{set(listed) - set(layer_of)}, twice: {[m for m in listed if listed.count(m) > 1]}"
    )
    order = [layer_of[m] for m in listed]
    steps = zip(listed[1:], order[:-1], order[1:], strict=True)
    out_of_order = [module for module, before, now in steps if now < before]
    assert not out_of_order, f"listed below a lower layer: {out_of_order}"


def test_the_architecture_page_names_the_modules_allowed_http_types():
    """The page's http rule names the modules the contract leaves out of its sources."""
    sources = set(_contracts()["http"]["source_modules"])
    allowed = [m for m in _listed_modules() if m not in sources]
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rule = page.split("- **http**:", 1)[1].split("\n- ", 1)[0]
    named = re.findall(r"`(app\.\w+)`", rule)
    assert named == allowed
