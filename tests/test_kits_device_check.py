"""The device check of a kit with the labelled Core ML stand-in (the reference executor behind
Core ML's interface): every program loaded and timed, the generate loop run through the
runtime's functions, tokens and logits compared with the reference, and the report marked as a
stand-in's; Core ML itself is refused here with its reason."""

from __future__ import annotations

import contextlib
import sys

import pytest
from kit_support import KIT_LLAMA, write_model

from app.errors import RequestError
from app.kits import KitOptions, build_kit_files
from app.kits.device_check import STAND_IN, CoreMLRuntime, StandInRuntime, device_check


@pytest.fixture(scope="module")
def kit_files(tmp_path_factory):
    folder = write_model(tmp_path_factory.mktemp("ckpt") / "llama", KIT_LLAMA, seed=3)
    return build_kit_files(
        folder, KitOptions(format="mlpackage", kv="state", context=16, prefill=4)
    ).files


def test_the_stand_in_runs_the_loop_and_says_it_is_a_stand_in(kit_files):
    report = device_check(kit_files, StandInRuntime, device="m4", max_new_tokens=4)
    assert report["runtime"] == STAND_IN and report["stand_in"] is True
    assert [p["name"] for p in report["programs"]] == ["decoder_0", "head_0", "head_1"]
    for program in report["programs"]:
        assert program["first_load_s"] > 0 and program["placement"]["available"] is False
    assert len(report["tokens"]) == 4 and report["tokens_match"] and report["passed"]
    assert report["logits_max_rel_error"] <= report["tolerance"]
    # the stand-in is the reference executor itself, each program run on its own: the gate's
    # measures find only rounding between them (a faulty runtime shows as KL and cosine)
    quality = report["quality"]
    assert quality["kl_mean"] < 1e-6 and quality["top1_agreement"] == 1
    assert quality["cosine_min"] > 0.99999
    assert report["decode_s_per_token"] > 0 and report["prefill_s"] > 0
    row = report["calibration_row"]
    assert row["measured"] is False and row["device"] == "m4" and row["runtime"] == STAND_IN


@pytest.mark.skipif(sys.platform == "darwin", reason="Core ML is there on macOS")
def test_core_ml_is_refused_off_macos_with_its_reason(kit_files):
    with pytest.raises(RequestError) as err:
        device_check(kit_files, CoreMLRuntime, device="m4")
    assert err.value.field == "runtime" and "macOS" in err.value.message


def test_the_report_carries_what_the_calibration_fits(kit_files):
    """The measured row names the kit's shape, its stored precision and context, and the kit."""
    import hashlib

    from app.kits.manifest import KIT_JSON

    row = device_check(kit_files, StandInRuntime, device="m4", max_new_tokens=2)["calibration_row"]
    assert row["shape"] | {"tied": None, "mlp_matrices": None} == {
        "layers": KIT_LLAMA["num_hidden_layers"],
        "hidden": KIT_LLAMA["hidden_size"],
        "intermediate": KIT_LLAMA["intermediate_size"],
        "heads": KIT_LLAMA["num_attention_heads"],
        "kv_heads": KIT_LLAMA["num_key_value_heads"],
        "head_dim": KIT_LLAMA["hidden_size"] // KIT_LLAMA["num_attention_heads"],
        "vocab": KIT_LLAMA["vocab_size"],
        "tied": None,
        "mlp_matrices": None,
    }
    assert row["precision"] == "fp16" and row["context"] == 16
    assert row["kit"] == hashlib.sha256(kit_files[KIT_JSON]).hexdigest()


# -- `ane-kernels calibrate`: a device check's row into the estimate's calibration -------------


@pytest.fixture
def stand_in_job(kit_files, tmp_path):
    """A device-check job's JSON, as `GET /v1/jobs/{id}` gives it, with the stand-in's report."""
    import json

    report = device_check(kit_files, StandInRuntime, device="m4", max_new_tokens=2)
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"id": "j1", "state": "succeeded", "device_check": report}))
    return path, report


def test_a_stand_in_report_never_becomes_a_calibration_row(stand_in_job, tmp_path, capsys):
    from app.cli import main

    path, _ = stand_in_job
    assert main(["calibrate", str(path), "--rows", str(tmp_path / "rows.json")]) == 2
    err = capsys.readouterr().err
    assert "stand_in" in err and "not a device's" in err
    assert not (tmp_path / "rows.json").exists()


def _as_core_ml_measured(report: dict, **row) -> dict:
    """The report with a measurement Core ML made on the device in its row (the stand-in cannot
    make one here): only the fields a Core ML run changes. Its speed is, unless given, what the
    estimate predicts for the kit on the device (the stand-in's is a Linux machine's, which the
    calibration refuses as implausible)."""
    from pydantic import ValidationError

    from app.devices.calibration import measured_row, predict
    from app.devices.measured import MeasuredRow

    fields = report["calibration_row"] | row
    fields = {k: fields[k] for k in MeasuredRow.model_fields if k != "id"}
    if "decode_tokens_per_s" not in row:
        with contextlib.suppress(ValidationError):  # a row refused for another field
            draft = MeasuredRow(id="draft", **fields)
            row = row | {"decode_tokens_per_s": predict(measured_row(draft))}
    return report | {
        "stand_in": False,
        "runtime": CoreMLRuntime.label,
        "calibration_row": report["calibration_row"]
        | {"runtime": CoreMLRuntime.label, "measured": True, **row},
    }


def test_a_device_measurement_joins_the_fit_as_the_published_one_would(
    stand_in_job, tmp_path, capsys
):
    """The published Qwen3-1.7B measurement on the A17 Pro (17 tok/s, 6-bit palettized, context
    2048: calibration row qwen3-1.7b-a17pro) as a device check would report it: the row it
    becomes is predicted exactly as the published row is."""
    import json
    from dataclasses import asdict

    from app.cli import main
    from app.devices.calibration import QWEN3_1_7B, ROWS, measured_row, predict
    from app.devices.measured import read_rows

    _, report = stand_in_job
    qwen3_1_7b = asdict(QWEN3_1_7B)
    measured = _as_core_ml_measured(
        report,
        device="a17-pro",
        model="qwen3 28x2048",
        shape=qwen3_1_7b,
        precision="6-bit palettized",
        context=2048,
        decode_tokens_per_s=17.0,
    )
    path, rows = tmp_path / "report.json", tmp_path / "rows.json"
    path.write_text(json.dumps(measured))
    assert main(["calibrate", str(path), "--rows", str(rows)]) == 0
    (row,) = read_rows(rows)
    assert row.device == "a17-pro" and row.decode_tokens_per_s == 17.0
    published = next(r for r in ROWS if r.id == "qwen3-1.7b-a17pro")
    assert predict(measured_row(row)) == pytest.approx(predict(published), rel=1e-12)
    out = capsys.readouterr().out
    assert f"the estimate said {predict(published):.4g}" in out
    assert main(["calibrate", str(path), "--rows", str(rows)]) == 0  # the same row again
    assert "already there" in capsys.readouterr().out and len(read_rows(rows)) == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"device": "m99"}, "calibration_row.device"),
        ({"precision": "not modelled (prune weights)"}, "calibration_row.precision"),
        ({"decode_tokens_per_s": 0}, "calibration_row.decode_tokens_per_s"),
    ],
)
def test_a_row_the_fit_cannot_use_is_refused_by_field(
    stand_in_job, tmp_path, capsys, change, field
):
    import json

    from app.cli import main

    _, report = stand_in_job
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_as_core_ml_measured(report, **change)))
    assert main(["calibrate", str(path), "--rows", str(tmp_path / "rows.json")]) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "rows.json").exists()


def test_a_rows_file_that_cannot_be_written_exits_2_naming_it(stand_in_job, tmp_path, capsys):
    """(In the Docker image the package's own rows file is not writable by the service's user.)"""
    import json

    from app.cli import main

    _, report = stand_in_job
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_as_core_ml_measured(report)))
    rows = tmp_path / "no-such-folder" / "rows.json"
    assert main(["calibrate", str(path), "--rows", str(rows)]) == 2
    err = capsys.readouterr().err
    assert str(rows) in err and "--rows" in err and not rows.exists()
