"""docs/onnx.md's op table is app/onnx/support.py's: every op listed with how it is lowered and
what it waits on or why it is refused, and every op the importer has a lowering for is in it."""

from __future__ import annotations

import re
from pathlib import Path

from app.onnx.importer import HANDLERS
from app.onnx.support import REFUSED, SUPPORTED, WAITING

PAGE = Path(__file__).resolve().parent.parent / "docs" / "onnx.md"
ROW = re.compile(r"^\| (?P<op>[A-Za-z0-9]+) \| (?P<how>.*) \| (?P<waits>.*) \|$")


def _table() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        match = ROW.match(line)
        if match and match["op"] != "ONNX":
            rows[match["op"]] = (match["how"].replace("\\|", "|"), match["waits"])
    return rows


def test_the_op_table_is_the_importers():
    rows = _table()
    assert set(rows) == set(SUPPORTED) | set(WAITING) | set(REFUSED)
    assert not set(WAITING) & set(REFUSED)
    for op, (how, waits) in rows.items():
        assert how == SUPPORTED.get(op, "—"), op
        primitive = WAITING.get(op)
        if primitive is not None:
            assert waits.startswith(f"`{primitive.split(' ')[0]}`"), op
        elif op in REFUSED:
            assert waits == f"refused: {REFUSED[op]}", op
        else:
            assert waits == "", op


def test_every_lowering_is_listed_as_supported():
    evaluated = {op for op, how in SUPPORTED.items() if how.startswith("evaluated at import")}
    patterns = {"Erf"}  # lowered by app/onnx/patterns.py
    assert set(HANDLERS) <= set(SUPPORTED)
    assert set(SUPPORTED) <= set(HANDLERS) | evaluated | patterns | {"Constant"}
