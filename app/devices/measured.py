"""Rows measured by the service itself: a device-check job (app/kits/device_check.py) run by
Core ML on a real device gives a kit's decode speed there, and that becomes a calibration row
fitted with the published ones (app/devices/calibration.py).

The rows live in `measured_rows.json` beside this module, one JSON object per row, added by
`ane-kernels calibrate REPORT.json`. Each keeps what the fit needs — the decoder's shape, the
stored precision, the context — and where it came from: the device, the runtime that measured
it, the kit's digest. A stand-in's report is refused (its times are a Linux machine's, not a
device's), as is a precision the estimate has no term for.

The report and the rows file are files a user hands in: read through the bounded JSON reader
(app/core/jsonfile.py) into these models, strictly (a speed is a finite positive number, a
precision one of the estimate's own), every fault naming the file and the key. Whether a speed
is plausible for the kit is the calibration's to say (app/devices/calibration.py, `plausible`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

from app.core.jsonfile import JsonLimits, read_json, validate
from app.devices.llm import PRECISIONS, DecoderShape, Precision
from app.devices.table import CHIPS_BY_NAME
from app.errors import FieldError

MEASURED_ROWS = Path(__file__).with_name("measured_rows.json")
SOURCE = "device-check"  # its row in app/devices/sources.py


MAX_DIM = 1 << 24  # the planner's bound on any size of a config (app/checkpoints/config.py)
Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]


class MeasuredShape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: Annotated[int, Field(ge=1, le=4096)]
    hidden: Dim
    intermediate: Dim
    heads: Dim
    kv_heads: Dim
    head_dim: Dim
    vocab: Dim
    tied: bool = True
    mlp_matrices: int = Field(3, ge=2, le=3)

    def decoder(self) -> DecoderShape:
        return DecoderShape(**self.model_dump())


class MeasuredRow(BaseModel):
    """One device-check measurement, as kept in measured_rows.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=256)
    device: str
    model: str = Field(max_length=256)
    shape: MeasuredShape
    precision: str  # a Precision name: "fp16", "int8", "<bits>-bit palettized"
    context: int = Field(ge=1, le=1 << 17)
    runtime: str = Field(max_length=256)
    decode_tokens_per_s: float = Field(gt=0, allow_inf_nan=False)
    kit: str = Field(pattern=r"^[0-9a-f]{64}$")  # sha256 of the kit's kit.json

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        if value not in CHIPS_BY_NAME:
            raise ValueError(f"{value!r} is not in the device table ({', '.join(CHIPS_BY_NAME)})")
        return value

    @field_validator("precision")
    @classmethod
    def _modelled_precision(cls, value: str) -> str:
        precision_named(value)
        return value


def precision_named(name: str) -> Precision:
    """The Precision whose `name` this is: one the estimate models (fp16, int8, palettized with
    a table coremltools writes: 1, 2, 3, 4, 6 or 8 bits)."""
    found = PRECISIONS.get(name)
    if found is None:
        raise ValueError(
            f"{name!r} is not one of the precisions the estimate models: {', '.join(PRECISIONS)}"
        )
    return found


class MeasuredRows(RootModel[Annotated[list[MeasuredRow], Field(max_length=1 << 14)]]):
    """A rows file: the measured rows, in the order they were added."""


class ReportRow(BaseModel):
    """What a report's `calibration_row` says of who measured it (the rest is a MeasuredRow)."""

    model_config = ConfigDict(extra="allow")

    measured: bool = False
    runtime: str = "a stand-in"
    device: str = Field("", max_length=64)
    kit: str = Field("", max_length=64)


class DeviceCheckReport(BaseModel):
    """A device-check report, as a job's `device_check` holds it: the keys calibration reads."""

    model_config = ConfigDict(extra="allow")

    stand_in: bool | None = None
    calibration_row: ReportRow


class NotACalibrationRow(FieldError):
    """A report that cannot become a measured row; its field names the key at fault."""


def row_from_report(report: Any, file: str = "the report") -> MeasuredRow:
    """A device-check report's measured row (`report["calibration_row"]`), checked."""
    if not isinstance(report, dict) or not isinstance(report.get("calibration_row"), dict):
        raise NotACalibrationRow(
            "calibration_row",
            f"{file}: not a device-check report (a job's `device_check`, or the report itself)",
        )
    checked = validate(report, DeviceCheckReport, file, field="report")
    row = checked.calibration_row
    if checked.stand_in or not row.measured:
        raise NotACalibrationRow(
            "stand_in",
            f"{file}: measured by {row.runtime}, not by Core ML on the device: its times are not "
            "a device's",
        )
    fields = {k: report["calibration_row"].get(k) for k in MeasuredRow.model_fields if k != "id"}
    row_id = f"{SOURCE}-{row.device}-{row.kit[:12]}"
    return validate({"id": row_id, **fields}, MeasuredRow, file, field="calibration_row")


def read_rows(path: str | os.PathLike = MEASURED_ROWS) -> tuple[MeasuredRow, ...]:
    """A rows file's rows (none when there is no file), bounded and checked."""
    if not os.path.exists(path):
        return ()
    raw = read_json(path, str(path), JsonLimits(), "rows")
    return tuple(validate(raw, MeasuredRows, str(path), "rows").root)


def add_row(
    row: MeasuredRow,
    path: str | os.PathLike = MEASURED_ROWS,
    held: tuple[MeasuredRow, ...] | None = None,
) -> bool:
    """Append `row` (replacing one of the same id: the same kit measured again on the device)
    to the rows `held` there (default: read now); False when an identical row is there already.
    The file stays strict JSON."""
    held = read_rows(path) if held is None else held
    if row in held:
        return False
    rows = [r for r in held if r.id != row.id] + [row]
    text = json.dumps([r.model_dump(mode="json") for r in rows], indent=2, allow_nan=False)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)
    return True
