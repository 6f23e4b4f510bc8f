"""Hostile reports and rows files at `ane-kernels calibrate`: a speed that is not finite,
positive and within what the estimate model could be off by, a precision the estimate does not
model, JSON nested deep or too large, a rows file that is corrupt: each exit 2 naming the file
and the key, the rows file untouched; a good report is added and the rows file stays strict
JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from app.cli import main
from app.devices import calibration
from app.devices.calibration import measured_row, plausible_range, predict
from app.devices.measured import MeasuredRow, read_rows

QWEN3_1_7B = asdict(calibration.QWEN3_1_7B)  # the published shape the fit knows
ROW = {
    "device": "a17-pro",
    "model": "qwen3 28x2048",
    "shape": QWEN3_1_7B,
    "precision": "6-bit palettized",
    "context": 2048,
    "runtime": "Core ML (CPU_AND_NE)",
    "decode_tokens_per_s": 17.0,  # the published measurement (qwen3-1.7b-a17pro)
    "kit": "ab" * 32,
    "measured": True,
}


def report(**row) -> dict:
    return {"stand_in": False, "runtime": ROW["runtime"], "calibration_row": ROW | row}


def predicted(**row) -> float:
    fields = {k: (ROW | row)[k] for k in MeasuredRow.model_fields if k != "id"}
    return predict(measured_row(MeasuredRow(id="x", **fields)))


def calibrate(tmp_path: Path, body: bytes | str | dict, rows: Path | None = None):
    path = tmp_path / "report.json"
    path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
    rows = rows or tmp_path / "rows.json"
    return main(["calibrate", str(path), "--rows", str(rows)]), rows


# (what, the report, words the error holds): finding 9
BAD_REPORTS = [
    ("speed 1e-300", report(decode_tokens_per_s=1e-300), "decode_tokens_per_s"),
    ("speed 0", report(decode_tokens_per_s=0), "decode_tokens_per_s"),
    ("speed negative", report(decode_tokens_per_s=-17.0), "decode_tokens_per_s"),
    ("speed a string", report(decode_tokens_per_s="17"), "decode_tokens_per_s"),
    ("speed 12x the estimate", report(decode_tokens_per_s=12 * predicted()), "outside"),
    ("speed a tenth and less", report(decode_tokens_per_s=predicted() / 11), "outside"),
    ("0-bit", report(precision="0-bit palettized"), "precision"),
    ("99999-bit", report(precision="99999-bit palettized"), "precision"),
    ("5-bit", report(precision="5-bit palettized"), "precision"),
    ("a device not in the table", report(device="m99"), "device"),
    ("layers 10^9", report(shape=QWEN3_1_7B | {"layers": 10**9}), "layers"),
    ("kit not a digest", report(kit="../../etc"), "kit"),
    ("measured a string", report(measured="yes"), "measured"),
]


@pytest.mark.parametrize(("what", "body", "words"), BAD_REPORTS, ids=[c[0] for c in BAD_REPORTS])
def test_a_bad_report_is_refused_naming_the_key(tmp_path, capsys, what, body, words):
    code, rows = calibrate(tmp_path, body)
    err = capsys.readouterr().err
    assert code == 2, err
    assert words in err and "Traceback" not in err, err
    assert not rows.exists()


def _literal(value: str) -> bytes:
    return json.dumps(report()).replace("17.0", value).encode()


BAD_BYTES = [
    ("Infinity", _literal("Infinity"), "Infinity is not JSON"),
    ("NaN", _literal("NaN"), "NaN is not JSON"),
    ("1e400", _literal("1e400"), "beyond the range"),
    ("nested 50,000 deep", b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "deep"),
    ("2 MiB", json.dumps(report() | {"pad": "x" * (2 << 20)}).encode(), "ANE_MAX_JSON_BYTES"),
    ("not UTF-8", b'{"stand_in": "\xff"}', "UTF-8"),
    ("a list", b"[1, 2, 3]", "not a device-check report"),
]


@pytest.mark.parametrize(("what", "body", "words"), BAD_BYTES, ids=[c[0] for c in BAD_BYTES])
def test_a_report_that_is_not_strict_json_is_refused(tmp_path, capsys, what, body, words):
    code, rows = calibrate(tmp_path, body)
    err = capsys.readouterr().err
    assert code == 2 and words in err and "report.json" in err, err
    assert not rows.exists()


BAD_ROWS = [
    ("not JSON", b"[{"),
    ("nested deep", b"[" * 50_000 + b"]" * 50_000),
    ("an object", b'{"rows": []}'),
    ("a row with Infinity", b'[{"decode_tokens_per_s": Infinity}]'),
    (
        "a row of 0-bit",
        json.dumps([{"id": "r"} | ROW | {"precision": "0-bit palettized"}]).encode(),
    ),
    ("a row of speed 0", json.dumps([{"id": "r"} | ROW | {"decode_tokens_per_s": 0}]).encode()),
]


@pytest.mark.parametrize(("what", "body"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_a_corrupt_rows_file_is_refused_and_left_alone(tmp_path, capsys, what, body):
    rows = tmp_path / "rows.json"
    rows.write_bytes(body)
    code, _ = calibrate(tmp_path, report(), rows)
    err = capsys.readouterr().err
    assert code == 2 and "rows.json" in err and "Traceback" not in err, err
    assert rows.read_bytes() == body


def test_a_plausible_report_is_added_as_strict_json(tmp_path, capsys):
    low, high = plausible_range(measured_row(MeasuredRow(id="x", **_fields())))
    assert low < 17.0 < high and high < 4 * predicted() and low > predicted() / 11
    code, rows = calibrate(tmp_path, report())
    assert code == 0, capsys.readouterr().err
    text = rows.read_text()

    def refuse(name: str):
        raise ValueError(name)

    json.loads(text, parse_constant=refuse)  # no NaN, no Infinity
    (row,) = read_rows(rows)
    assert row.decode_tokens_per_s == 17.0 and row.precision == "6-bit palettized"


def _fields() -> dict:
    return {k: ROW[k] for k in MeasuredRow.model_fields if k != "id"}
