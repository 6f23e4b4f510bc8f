"""No import cycles anywhere in the app, package `__init__` modules included.

import-linter's `acyclic` contract looks at the modules of each package among themselves; this
reads the whole graph (grimp's, the one import-linter reads), where a package is a node of its
own (its `__init__`), so a module importing from its own package while the package imports that
module is a cycle here. Imports inside functions and under TYPE_CHECKING count as well."""

from __future__ import annotations

import graphlib

import grimp


def _imports() -> dict[str, set[str]]:
    graph = grimp.build_graph("app", cache_dir=None)
    return {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}


def _cycle(imports: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_app_has_no_import_cycle():
    cycle = _cycle(_imports())
    assert cycle is None, "import cycle: " + " -> ".join(reversed(cycle or []))


def test_a_module_importing_its_own_package_is_found():
    """What the test above catches, on a graph made here: a package that imports a module which
    imports the package (the shape `from app.checkpoints import _fp16` had in convert.py)."""
    imports = {
        "pkg": {"pkg.load"},
        "pkg.load": {"pkg.convert"},
        "pkg.convert": {"pkg"},
        "other": {"pkg"},
    }
    assert set(_cycle(imports) or []) == {"pkg", "pkg.load", "pkg.convert"}
