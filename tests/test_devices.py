"""The device table: every number sourced and marked, the docs page in step with the code, the
preflight reading its limits from it, and `ane-kernels devices`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.devices import (
    CHIPS,
    CHIPS_BY_NAME,
    DEFAULT_PROGRAM_WEIGHT_BYTES,
    SOURCES_BY_KEY,
    Provenance,
    UnknownDevice,
    get_chip,
)
from app.devices.render import render_page
from app.preflight import (
    DEFAULT_MAX_PROGRAM_WEIGHT_BYTES,
    HARD_MAX_PROGRAM_WEIGHT_BYTES,
    checks_shapes,
)
from app.settings import Settings

REPO = Path(__file__).resolve().parent.parent
DEVICES_MD = REPO / "docs" / "devices.md"
# The chips the table must hold (issue 21), by their names.
NAMED = [
    "m1",
    "m1-pro",
    "m1-max",
    "m2",
    "m2-pro",
    "m2-max",
    "m3",
    "m3-pro",
    "m3-max",
    "m4",
    "m4-pro",
    "m4-max",
    "m5",
    "m5-pro",
    "m5-max",
    "a15",
    "a16",
    "a17-pro",
    "a18",
    "a18-pro",
    "a19-pro",
]


def _docs_sources() -> set[str]:
    text = DEVICES_MD.read_text().split("## Sources", 1)[1]
    return set(re.findall(r"^\| `([\w-]+)` \|", text, re.M))


def test_the_table_holds_every_chip_the_issue_names_in_lower_case_with_dashes():
    assert [c.name for c in CHIPS] == NAMED
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z]+)?", c.name) for c in CHIPS)


def test_every_device_number_has_a_source_in_the_docs_table_and_a_provenance():
    listed = _docs_sources()
    for chip in CHIPS:
        for quantity, fact in chip.facts().items():
            where = f"{chip.name}.{quantity}"
            assert fact.source in SOURCES_BY_KEY, where
            assert fact.source in listed, where
            assert isinstance(fact.provenance, Provenance), where
            if fact.provenance is Provenance.EXTRAPOLATED:
                assert fact.basis or fact.note, f"{where}: extrapolated from what?"
                assert set(fact.basis) <= set(CHIPS_BY_NAME), where
                assert chip.name not in fact.basis, where
            if fact.provenance is Provenance.ASSUMED:
                assert fact.note, where


def test_a_measured_fact_names_a_chip_its_source_measured():
    """Measured numbers are few: each must be on a chip its source speaks of."""
    measured = {
        (c.name, q)
        for c in CHIPS
        for q, f in c.facts().items()
        if f.provenance is Provenance.MEASURED
    }
    chips = {name for name, _ in measured}
    assert {"m1", "m4", "m5", "m3-max", "m4-max", "m5-max", "a19-pro"} <= chips
    assert ("a18-pro", "bandwidth_gbs") not in measured  # no one measured a phone's ANE bandwidth


def test_the_docs_page_prints_what_the_code_holds():
    text = DEVICES_MD.read_text()
    assert render_page(text) == text, "run: python -m app.devices.render docs/devices.md"
    assert "../shared" not in text


def test_an_unknown_device_names_the_known_ones():
    with pytest.raises(UnknownDevice) as err:
        get_chip("m9-ultra")
    message = str(err.value)
    assert "'m9-ultra'" in message
    for name in NAMED:
        assert name in message


def test_the_preflight_and_the_settings_read_their_limits_from_the_table():
    assert checks_shapes.AXIS_MAX_ANY_CHIP == max(c.axis_max.value for c in CHIPS) == 65_536
    assert checks_shapes.AXIS_MAX_OLDER_CHIPS == min(c.axis_max.value for c in CHIPS) == 16_384
    assert get_chip("a15").axis_max.value == 16_384 and get_chip("a16").axis_max.value == 65_536
    envelopes = [c.program_weight_bytes.value for c in CHIPS]
    assert DEFAULT_MAX_PROGRAM_WEIGHT_BYTES == DEFAULT_PROGRAM_WEIGHT_BYTES == min(envelopes)
    assert HARD_MAX_PROGRAM_WEIGHT_BYTES == max(envelopes) == 2 << 30
    assert Settings().max_program_weight_bytes == DEFAULT_PROGRAM_WEIGHT_BYTES


def test_the_default_budget_holds_a_1b_class_decoder_layer():
    """Llama-3.2-1B: hidden 2048, MLP 8192, 8 KV heads of 64: ~61 M params a layer in fp16."""
    hidden, mlp, kv = 2048, 8192, 8 * 64
    layer_bytes = 2 * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * mlp)
    assert 8 << 20 < layer_bytes < DEFAULT_PROGRAM_WEIGHT_BYTES


def test_iphones_hold_less_per_program_than_macs_and_every_phone_is_an_iphone_kind():
    for chip in CHIPS:
        envelope = chip.program_weight_bytes.value
        assert envelope == (1 << 30 if chip.name.startswith("a") else 2 << 30), chip.name
        assert chip.app_memory_bytes < chip.ram_bytes.value


def test_devices_lists_the_table_and_its_json_carries_every_fact():
    run = [sys.executable, "-m", "app.cli", "devices"]
    out = subprocess.run(run, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    for name in NAMED:
        assert f"`{name}`" in out.stdout
    listed = json.loads(subprocess.run([*run, "--json"], capture_output=True, text=True).stdout)
    a18 = next(c for c in listed if c["name"] == "a18-pro")
    bandwidth = a18["facts"]["bandwidth_gbs"]
    assert bandwidth["provenance"] == "extrapolated" and bandwidth["basis"] == ["m4"]
    assert bandwidth["source"] == "anemll-bench"
