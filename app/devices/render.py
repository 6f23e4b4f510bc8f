"""The device table as Markdown, for docs/devices.md: generated here so the numbers live in one
place (tests/test_devices.py holds the page to what this prints).

    python -m app.devices.render docs/devices.md docs/calibration.md   # rewrite the blocks

A page keeps its prose; what sits between `<!-- generated:NAME -->` and `<!-- end:NAME -->` is
replaced by the block NAME.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from app.devices.facts import Fact
from app.devices.markdown import table
from app.devices.products import PRODUCTS_SOURCE, aliases_of
from app.devices.sources import SOURCES
from app.devices.table import CHIPS, GB, MiB

UNITS: dict[str, tuple[str, Callable[[float], str]]] = {
    "peak_tflops": ("fp16 peak, TFLOP/s", lambda v: f"{v:g}"),
    "bandwidth_gbs": ("ANE bandwidth, GB/s", lambda v: f"{v:g}"),
    "floor_us": ("dispatch floor, µs", lambda v: f"{v:g}"),
    "axis_max": ("largest axis", lambda v: f"{v:,}"),
    "program_weight_bytes": ("weights per program", lambda v: f"{v / (1 << 30):g} GiB"),
    "working_set_bytes": ("on-chip working set", lambda v: f"{v / MiB:g} MiB"),
    "ram_bytes": ("smallest RAM", lambda v: f"{v / GB:g} GB"),
    "app_memory_share": ("share an app may use", lambda v: f"{v:.2f}"),
    "streams_palettized": ("streams palettized weights", lambda v: "yes" if v else "no"),
    "streams_int8": ("streams int8 weights", lambda v: "yes" if v else "no"),
}


def show(quantity: str, fact: Fact) -> str:
    return UNITS[quantity][1](fact.value)


def chips_summary() -> str:
    header = ["device", "chip", "kind", *(UNITS[q][0] for q in UNITS)]
    rows = [
        [f"`{c.name}`", c.title, c.kind, *(show(q, f) for q, f in c.facts().items())] for c in CHIPS
    ]
    return table(header, rows)


def products_table() -> str:
    """Every name a device may be given beside the chip's own (app/devices/products.py)."""
    rows = [[f"`{c.name}`", c.title, "; ".join(aliases_of(c.name))] for c in CHIPS]
    return table(["device", "chip", f"products (source `{PRODUCTS_SOURCE}`)"], rows)


def chip_facts() -> str:
    rows = [
        [f"`{c.name}`", UNITS[q][0], show(q, f), f.mark(), f"`{f.source}`", f.note]
        for c in CHIPS
        for q, f in c.facts().items()
    ]
    return table(["device", "quantity", "value", "provenance", "source", "note"], rows)


def sources_table() -> str:
    return table(
        ["source", "where", "what it gives"], ([f"`{s.key}`", s.where, s.says] for s in SOURCES)
    )


def blocks() -> dict[str, Callable[[], str]]:
    from app.devices.calibration_report import (
        calibration_table,
        excluded_table,
        model_formula,
        model_table,
    )

    return {
        "chips": chips_summary,
        "products": products_table,
        "facts": chip_facts,
        "sources": sources_table,
        "calibration": calibration_table,
        "excluded": excluded_table,
        "model": model_table,
        "formula": model_formula,
    }


_BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n)(.*?)(<!-- end:\2 -->)", re.S)


def render_page(text: str) -> str:
    """`text` with every generated block replaced by what the code prints now."""
    makers = blocks()
    return _BLOCK.sub(lambda m: m.group(1) + makers[m.group(2)]() + m.group(4), text)


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        text = path.read_text()
        path.write_text(render_page(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
