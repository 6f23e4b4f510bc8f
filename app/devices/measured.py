"""Rows measured by the service itself: a device-check job (app/kits/device_check.py) run by
Core ML on a real device gives a kit's decode speed there, and that becomes a calibration row
fitted with the published ones (app/devices/calibration.py).

The rows live in `measured_rows.json` beside this module, one JSON object per row, added by
`ane-kernels calibrate REPORT.json`. Each keeps what the fit needs — the decoder's shape, the
stored precision, the context — and where it came from: the device, the runtime that measured
it, the kit's digest. A stand-in's report is refused (its times are a Linux machine's, not a
device's), as is a precision the estimate has no term for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.devices.llm import FP16, INT8, DecoderShape, Precision, palettized
from app.devices.table import CHIPS_BY_NAME

MEASURED_ROWS = Path(__file__).with_name("measured_rows.json")
SOURCE = "device-check"  # its row in app/devices/sources.py


class MeasuredShape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    intermediate: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    vocab: int = Field(ge=1)
    tied: bool = True
    mlp_matrices: int = Field(3, ge=2, le=3)

    def decoder(self) -> DecoderShape:
        return DecoderShape(**self.model_dump())


class MeasuredRow(BaseModel):
    """One device-check measurement, as kept in measured_rows.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    device: str
    model: str
    shape: MeasuredShape
    precision: str  # a Precision name: "fp16", "int8", "<bits>-bit palettized"
    context: int = Field(ge=1)
    runtime: str
    decode_tokens_per_s: float = Field(gt=0)
    kit: str  # sha256 of the kit's kit.json

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
    """The Precision whose `name` this is; the estimate models fp16, int8 and palettized."""
    if name in (FP16.name, INT8.name):
        return FP16 if name == FP16.name else INT8
    bits, _, rest = name.partition("-bit ")
    if rest == "palettized" and bits.isdigit():
        return palettized(int(bits))
    raise ValueError(f"{name!r}: the estimate models fp16, int8 and <bits>-bit palettized weights")


class NotACalibrationRow(ValueError):
    """A report that cannot become a measured row; the message names the field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def row_from_report(report: dict[str, Any]) -> MeasuredRow:
    """A device-check report's measured row (`report["calibration_row"]`), checked."""
    if not isinstance(report, dict) or not isinstance(report.get("calibration_row"), dict):
        raise NotACalibrationRow(
            "calibration_row",
            "not a device-check report (a job's `device_check`, or the report itself)",
        )
    row = report["calibration_row"]
    if report.get("stand_in") or not row.get("measured"):
        raise NotACalibrationRow(
            "stand_in",
            f"measured by {row.get('runtime', 'a stand-in')}, "
            "not by Core ML on the device: its times are not a device's",
        )
    fields = {k: row.get(k) for k in MeasuredRow.model_fields if k != "id"}
    try:
        return MeasuredRow(id=f"{SOURCE}-{row.get('device')}-{str(row.get('kit'))[:12]}", **fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise NotACalibrationRow(f"calibration_row.{where}", first["msg"]) from None


def read_rows(path: Path = MEASURED_ROWS) -> tuple[MeasuredRow, ...]:
    if not path.exists():
        return ()
    return tuple(MeasuredRow(**row) for row in json.loads(path.read_text(encoding="utf-8")))


def add_row(row: MeasuredRow, path: Path = MEASURED_ROWS) -> bool:
    """Append `row` (replacing one of the same id: the same kit measured again on the device);
    False when an identical row is there already."""
    held = read_rows(path)
    if row in held:
        return False
    rows = [r for r in held if r.id != row.id] + [row]
    text = json.dumps([r.model_dump(mode="json") for r in rows], indent=2) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True
