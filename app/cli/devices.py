"""`devices`: the device table (docs/devices.md) on the command line."""

from __future__ import annotations

import json


def cmd_devices(args) -> int:
    from app.devices import CHIPS
    from app.devices.render import chips_summary

    if args.json:
        print(json.dumps([chip.to_json() for chip in CHIPS], indent=2))
    else:
        print(chips_summary(), end="")
    return 0


def add_commands(sub) -> None:
    dev = sub.add_parser(
        "devices", help="the Apple chips the service knows, each number with its source"
    )
    dev.add_argument("--json", action="store_true", help="every fact with source and provenance")
    dev.set_defaults(run=cmd_devices)
