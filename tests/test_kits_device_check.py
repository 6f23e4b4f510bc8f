"""The device check of a kit with the labelled Core ML stand-in (the reference executor behind
Core ML's interface): every program loaded and timed, the generate loop run through the
runtime's functions, tokens and logits compared with the reference, and the report marked as a
stand-in's; Core ML itself is refused here with its reason."""

from __future__ import annotations

import sys

import pytest
from kit_support import KIT_LLAMA, write_model

from app.errors import RequestError
from app.kits import KitOptions, build_kit_files
from app.kits.device_check import STAND_IN, CoreMLRuntime, StandInRuntime, device_check


@pytest.fixture(scope="module")
def kit_files(tmp_path_factory):
    folder = write_model(tmp_path_factory.mktemp("ckpt") / "llama", KIT_LLAMA, seed=3)
    return build_kit_files(folder, KitOptions(format="mlpackage", kv="state", context=16,
                                              prefill=4)).files  # fmt: skip


def test_the_stand_in_runs_the_loop_and_says_it_is_a_stand_in(kit_files):
    report = device_check(kit_files, StandInRuntime, device="m4", max_new_tokens=4)
    assert report["runtime"] == STAND_IN and report["stand_in"] is True
    assert [p["name"] for p in report["programs"]] == ["decoder_0", "head_0", "head_1"]
    for program in report["programs"]:
        assert program["first_load_s"] > 0 and program["placement"]["available"] is False
    assert len(report["tokens"]) == 4 and report["tokens_match"] and report["passed"]
    assert report["logits_max_rel_error"] <= report["tolerance"]
    assert report["decode_s_per_token"] > 0 and report["prefill_s"] > 0
    row = report["calibration_row"]
    assert row["measured"] is False and row["device"] == "m4" and row["runtime"] == STAND_IN


@pytest.mark.skipif(sys.platform == "darwin", reason="Core ML is there on macOS")
def test_core_ml_is_refused_off_macos_with_its_reason(kit_files):
    with pytest.raises(RequestError) as err:
        device_check(kit_files, CoreMLRuntime, device="m4")
    assert err.value.field == "runtime" and "macOS" in err.value.message
