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


@pytest.mark.parametrize(
    ("name", "chip"),
    [
        ("M4", "m4"),
        ("A18 Pro", "a18-pro"),
        ("a15 bionic", "a15"),
        ("iPhone 16 Pro", "a18-pro"),
        ("iphone16", "a18"),  # the trial's spelling: the iPhone 16
        ("IPHONE 15 PRO MAX", "a17-pro"),
        ("iPhone Air", "a19-pro"),
        ("MacBook Pro M4 Max", "m4-max"),
        ("mac mini m2 pro", "m2-pro"),
    ],
)
def test_a_device_is_named_in_any_case_by_its_chip_or_product(name, chip):
    assert get_chip(name).name == chip


def test_a_product_line_is_answered_with_its_chips():
    with pytest.raises(UnknownDevice) as err:
        get_chip("MacBook Air")
    assert "'MacBook Air' is a product line whose models hold different chips: m1, m2, m3, m4" in (
        str(err.value)
    )
    with pytest.raises(UnknownDevice) as err:
        get_chip("iphone")
    assert "a15, a16, a17-pro, a18, a18-pro, a19-pro" in str(err.value)
    with pytest.raises(UnknownDevice):
        get_chip("MacBook Air M1 Max")  # a chip no MacBook Air holds


def test_every_product_names_a_chip_of_the_table_and_its_source():
    from app.devices import FAMILIES, PRODUCTS
    from app.devices.products import PRODUCTS_SOURCE, aliases_of

    assert PRODUCTS_SOURCE in SOURCES_BY_KEY
    assert set(PRODUCTS.values()) | {c for chips in FAMILIES.values() for c in chips} <= set(
        CHIPS_BY_NAME
    )
    for chip in CHIPS:
        aliases = aliases_of(chip.name)
        assert aliases, chip.name  # every chip has a product a user may know it by
        assert all(get_chip(alias) is chip for alias in aliases)


def test_product_names_over_http_and_in_a_kit_request(client):
    """The plan answers for the chip; a kit asked for by product is the kit asked for by chip."""
    from app.kits.job import ModelRequest

    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 256,
    }
    plan = client.post("/v1/plan", json={"config": config, "device": "iPhone 16 Pro"})
    assert plan.status_code == 200 and plan.json()["device"] == "a18-pro"
    line = client.post("/v1/plan", json={"config": config, "device": "iPhone"})
    assert line.status_code == 422 and line.json()["field"] == "device"
    assert "a18-pro" in line.json()["detail"]
    files = {"config.json": "sha256:" + "0" * 64}
    by_product = ModelRequest.create(files, {"device": "iPhone 16 Pro"})
    assert by_product.key == ModelRequest.create(files, {"device": "a18-pro"}).key


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


@pytest.mark.slow
def test_devices_lists_the_table_and_its_json_carries_every_fact():
    run = [sys.executable, "-m", "app.cli", "devices"]
    out = subprocess.run(run, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    for name in NAMED:
        assert f"`{name}`" in out.stdout
    assert "iPhone 16 Pro" in out.stdout and "MacBook Pro M4 Max" in out.stdout
    listed = json.loads(subprocess.run([*run, "--json"], capture_output=True, text=True).stdout)
    a18 = next(c for c in listed if c["name"] == "a18-pro")
    bandwidth = a18["facts"]["bandwidth_gbs"]
    assert bandwidth["provenance"] == "extrapolated" and bandwidth["basis"] == ["m4"]
    assert bandwidth["source"] == "anemll-bench"
