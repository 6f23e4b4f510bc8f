"""The estimate model against every published measurement (leave-one-out), its monotonic
sanity, and docs/calibration.md in step with the code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.devices import CHIPS, SOURCES_BY_KEY, get_chip
from app.devices.calibration import EXCLUDED, INCLUDED, ROWS, fitted, leave_one_out
from app.devices.estimate_model import PATHS, RANGE, Efficiency, Work, chain_seconds, ramp, roofline
from app.devices.facts import measured
from app.devices.llm import FP16, DecoderShape, decode_works, group_layers, palettized
from app.devices.render import render_page

CALIBRATION_MD = Path(__file__).resolve().parent.parent / "docs" / "calibration.md"
EFF = Efficiency(0.9, 0.5)
LLAMA_1B = DecoderShape(16, 2048, 8192, 32, 8, 64, 128_256)


@pytest.mark.parametrize("check", leave_one_out(), ids=lambda c: c.row.id)
def test_every_included_row_is_predicted_within_the_range_leave_one_out(check):
    assert 1 / RANGE <= check.ratio <= RANGE, (check.row.id, check.predicted, check.row.measured)


def test_rows_are_sourced_and_every_exclusion_says_why():
    assert len(INCLUDED) >= 10 and {r.path for r in INCLUDED} >= {"coreml", "ane-direct"}
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))
    for row in ROWS:
        assert row.source in SOURCES_BY_KEY, row.id
        assert row.path in PATHS and row.measured > 0, row.id
    for row in INCLUDED:
        assert row.chip is not None and row.works is not None and row.precision != "unknown"
        get_chip(row.chip)
    for row in EXCLUDED:
        assert row.excluded, row.id
        if row.chip is None:
            assert "chip not named" in row.excluded
        if row.precision == "unknown":
            assert "precision" in row.excluded


def test_the_page_prints_what_the_code_fits():
    text = CALIBRATION_MD.read_text()
    assert render_page(text) == text, "run: python -m app.devices.render docs/calibration.md"
    for row in EXCLUDED:
        assert f"| {row.id} |" in text


def test_every_path_and_generation_gets_an_efficiency_in_a_sane_band():
    fit = fitted()
    for path in PATHS:
        for chip in CHIPS:
            eff = fit.efficiency(path, chip.generation)
            assert 0.2 < eff.memory <= 1.2 and 0.3 < eff.compute <= 1.2, (path, chip.name)


def test_more_weights_are_never_faster():
    chip = get_chip("m4")
    times = [roofline(chip, Work(1e9, w), EFF).seconds for w in (1e6, 1e7, 1e8, 1e9, 4e9)]
    assert times == sorted(times) and times[-1] > times[0]
    small = DecoderShape(16, 2048, 4096, 32, 8, 64, 32_000)  # LLAMA_1B with half the MLP

    def token(shape):
        return chain_seconds(
            chip, decode_works(shape, FP16, chip, group_layers(shape, FP16, chip), 1024), EFF
        )

    assert token(small) < token(LLAMA_1B)


def test_more_flops_are_never_faster_and_the_ramp_saturates():
    chip = get_chip("m1")
    times = [roofline(chip, Work(f, 0), EFF).seconds for f in (1e6, 1e8, 1e10, 1e12)]
    assert times == sorted(times)
    assert ramp(1e6) < ramp(1e9) < ramp(1.8e10) == ramp(1e12) == 1.0


def test_more_programs_cost_more_dispatch_time():
    chip = get_chip("a18-pro")
    whole = Work(4e9, 4e8)
    for parts in (2, 4, 8):
        split = [Work(whole.flops / parts, whole.weight_bytes / parts)] * parts
        assert chain_seconds(chip, split, EFF) > chain_seconds(chip, [whole], EFF)
        extra = chain_seconds(chip, split, EFF) - chain_seconds(chip, [whole], EFF)
        assert extra >= (parts - 1) * chip.floor_us.value * 1e-6 * 0.99


def test_more_bandwidth_is_never_slower():
    chip = get_chip("m4")
    shape, precision = LLAMA_1B, palettized(4)
    works = decode_works(shape, precision, chip, group_layers(shape, precision, chip), 2048)
    times = []
    for gbs in (30, 64, 120, 400):
        faster = dataclasses.replace(chip, bandwidth_gbs=measured(gbs, "anemll-bench"))
        times.append(chain_seconds(faster, works, EFF))
    assert times == sorted(times, reverse=True) and times[0] > times[-1]


def test_a_chip_that_streams_palettized_weights_reads_fewer_bytes_than_fp16():
    chip = get_chip("m4")
    grouping = group_layers(LLAMA_1B, FP16, chip)
    fp16 = sum(w.weight_bytes for w in decode_works(LLAMA_1B, FP16, chip, grouping, 512))
    lut4 = sum(w.weight_bytes for w in decode_works(LLAMA_1B, palettized(4), chip, grouping, 512))
    assert lut4 == pytest.approx(fp16 / 4)
