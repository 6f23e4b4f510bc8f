"""docs/catalog.md's two tables held to the catalog: the op table names every op in the catalog's
order with each of its parameters and weights, and the tolerance table gives every op the
tolerance its module declares."""

from __future__ import annotations

import re

from conftest import REPO

from app.kernels import CATALOG

DOC = (REPO / "docs" / "catalog.md").read_text()
TICKED = re.compile(r"`([^`]+)`")
OWN = re.compile(r"(\w+)'s\b")  # "attention's": the parameters or weights of another op


def _table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table after the line that starts with `heading`."""
    lines = DOC[DOC.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([c.strip() for c in cells])
    return rows


def _items(cell: str) -> list[str]:
    """A cell's comma-separated items, commas inside parentheses and braces kept."""
    items, depth, current = [], 0, ""
    for char in cell:
        depth += char in "({"
        depth -= char in ")}"
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    return [*items, current.strip()]


def _expand(name: str) -> list[str]:
    """`self_attn.{q,k}_norm.weight` -> each name it stands for."""
    match = re.search(r"\{([^}]*)\}", name)
    if match is None:
        return [name]
    head, tail = name[: match.start()], name[match.end() :]
    return [n for part in match.group(1).split(",") for n in _expand(head + part + tail)]


def _params(op: str) -> set[str]:
    return set(CATALOG[op].params.model_fields)


def _weights(op: str) -> set[str]:
    return {n for w in CATALOG[op].weight_docs for n in _expand(w.name)}


def test_the_op_table_lists_the_catalog_with_its_parameters_and_weights():
    rows = _table("| op | parameters | weights |")
    assert [TICKED.findall(row[0])[0] for row in rows] == list(CATALOG)
    for op_cell, params_cell, weights_cell in rows:
        op = TICKED.findall(op_cell)[0]
        named, inherited = set(), set()
        for item in _items(params_cell):
            refs = OWN.findall(item)
            if refs:
                inherited |= {p for ref in refs for p in _params(ref)}
            else:
                named.add(re.match(r"\w+", item).group(0))
        assert named <= _params(op), (op, named - _params(op))
        assert _params(op) <= named | inherited, (op, _params(op) - named - inherited)
        listed: set[str] = set()
        for ref in OWN.findall(weights_cell):
            listed |= _weights(ref)
        for name in TICKED.findall(weights_cell):
            nested = re.fullmatch(r"(.*)<(\w+) weight>", name)
            if nested:  # `layers.<i>.<decoder_layer weight>`
                listed |= {nested.group(1) + w for w in _weights(nested.group(2))}
            else:
                listed |= set(_expand(name))
        assert _weights(op) <= listed, (op, _weights(op) - listed)


def test_the_tolerance_table_gives_each_op_its_tolerance():
    seen: list[str] = []
    for row in _table("| op | tolerance | worst measured | what drives it |"):
        for op in TICKED.findall(row[0]):
            assert op in CATALOG, op
            assert float(row[1]) == CATALOG[op].tolerance, (op, row[1])
            seen.append(op)
    assert sorted(seen) == sorted(CATALOG)
