"""`devices`, `plan`, `calibrate`: the device table (docs/devices.md), the planner, and a device
check's measurement added to the estimate's calibration, on the command line."""

from __future__ import annotations

import json
from pathlib import Path

from app.checkpoints.config import json_limits, read_config
from app.cli.common import CLIError
from app.cli.layout import add_layout_options, describe_plan
from app.core.jsonfile import read_json
from app.devices import CHIPS
from app.devices.calibration import check_plausible
from app.devices.estimate_model import PATHS
from app.devices.measured import MEASURED_ROWS, add_row, read_rows, row_from_report
from app.devices.render import chips_summary, products_table
from app.errors import FieldError
from app.planner import DEFAULT_PROMPT, make_plan


def cmd_devices(args) -> int:

    if args.json:
        print(json.dumps([chip.to_json() for chip in CHIPS], indent=2))
    else:
        print(chips_summary(), end="")
        print("\nProduct names are accepted too (any case and spacing):")
        print(products_table(), end="")
    return 0


def add_commands(sub) -> None:

    dev = sub.add_parser(
        "devices", help="the Apple chips the service knows, each number with its source"
    )
    dev.add_argument("--json", action="store_true", help="every fact with source and provenance")
    dev.set_defaults(run=cmd_devices)

    plan = sub.add_parser(
        "plan",
        help="the kit `model` builds with the same options, from config.json alone: programs, "
        "and on a device speed, memory, what does not fit",
    )
    plan.add_argument(
        "config",
        metavar="CONFIG_OR_CHECKPOINT",
        help="a config.json, or a checkpoint (directory or file) beside one",
    )
    add_layout_options(plan)
    plan.add_argument(
        "--prompt-tokens",
        type=int,
        help=f"the prompt the prefill speed is predicted for (default min({DEFAULT_PROMPT}, "
        "context))",
    )
    plan.add_argument(
        "--strict",
        action="store_true",
        help="exit 2 where `model --strict` would refuse the kit (a quantization reported "
        "failing or not modelled)",
    )
    plan.add_argument("--path", default="coreml", choices=PATHS, help="the runtime path")
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    plan.set_defaults(run=cmd_plan)

    calibrate = sub.add_parser(
        "calibrate",
        help="add a device check's measured decode speed to the estimate's "
        "calibration (a Core ML report from a macOS worker; a stand-in's is refused)",
    )
    calibrate.add_argument(
        "report",
        metavar="REPORT_JSON",
        type=Path,
        help="a device-check job as JSON, or its `device_check` report",
    )
    calibrate.add_argument(
        "--rows",
        type=Path,
        default=MEASURED_ROWS,
        help="the measured rows file (default: the one the estimate reads)",
    )
    calibrate.set_defaults(run=cmd_calibrate)


def cmd_calibrate(args) -> int:
    try:
        report = read_json(args.report, str(args.report), json_limits(), "report")
        if isinstance(report, dict) and isinstance(report.get("device_check"), dict):
            report = report["device_check"]  # a job's JSON
        row = row_from_report(report, str(args.report))
        # what the estimate said before this row was part of its fit: how far off it was; a
        # speed it could not be off by is refused
        predicted = check_plausible(row)
        held = read_rows(args.rows)
    except FieldError as exc:  # each names its file, or is about the report
        raise CLIError(str(exc)) from None
    try:
        added = add_row(row, args.rows, held)
    except OSError as exc:
        raise CLIError(
            f"{args.rows}: cannot write the measured rows ({exc}); name a writable file with --rows"
        ) from None
    print(f"{'added' if added else 'already there'}: {row.id} to {args.rows}")
    print(
        f"{row.model} on {row.device}, {row.precision}, context {row.context}: measured "
        f"{row.decode_tokens_per_s:.4g} decode tok/s; the estimate said {predicted:.4g} "
        f"({predicted / row.decode_tokens_per_s:.2f}x)"
    )
    if added and args.rows == MEASURED_ROWS:
        print(
            "the estimate fits it from the next start; docs: python -m app.devices.render "
            "docs/devices.md docs/calibration.md"
        )
    return 0


def _config_path(where: Path) -> Path:
    """A config.json, a checkpoint directory holding one, or a checkpoint file beside one."""
    if where.is_dir():
        return where / "config.json"
    if where.suffix == ".json" and where.name != "model.safetensors.index.json":
        return where
    return where.parent / "config.json"


def cmd_plan(args) -> int:

    quantize = None
    if args.quantize is not None:
        try:
            quantize = json.loads(args.quantize)
        except ValueError as exc:
            raise CLIError(f"--quantize: not JSON: {exc}") from None
    try:
        config = read_config(_config_path(Path(args.config)))
        plan = make_plan(
            config,
            args.device,
            quantize=quantize,
            context=args.context,
            prefill=args.prefill,
            prompt=args.prompt_tokens,
            kv=args.kv,
            path=args.path,
        )
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    answer = plan.to_json()
    refused = plan.strict_refusals()
    if args.strict and refused:
        raise CLIError(
            "refused (--strict): " + "; ".join(f"{w['part']}: {w['message']}" for w in refused)
        )
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    print(describe_plan(answer))
    return 0
