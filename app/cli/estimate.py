"""`estimate ARTIFACT`: what a built artifact costs on each device, read from its programs.

An artifact is a zip the service wrote, or its unpacked directory: a mil bundle (model.mil),
an .mlmodelc (model.mil), an .mlpackage (its protobuf program, written out as an .mlmodelc on
this machine first), or a chain of any of them (chain.json gives the order). Each program is
parsed back into the IR and its work priced on the devices (app/estimates).
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

from app.cli.common import CLIError
from app.devices.estimate_model import PATHS
from app.errors import FieldError
from app.estimates import devices_or_error, estimate_works, program_works
from app.language.errors import MlmodelcError
from app.mil import MILParseError, parse_text
from app.mlmodelc import compile_package

MIL, WEIGHTS, CHAIN = "model.mil", "weights/weight.bin", "chain.json"


def _unpack(artifact: Path, into: Path) -> Path:
    if artifact.is_dir():
        return artifact
    try:
        with zipfile.ZipFile(artifact) as zf:
            zf.extractall(into)
    except (OSError, zipfile.BadZipFile) as exc:
        raise CLIError(f"{artifact}: not an artifact zip or directory: {exc}") from None
    return into


def _programs(root: Path, scratch: Path) -> tuple[list[tuple[str, Path]], str]:
    """(name, directory holding model.mil) per program, in run order; and the artifact's kind."""
    chain = root / CHAIN
    if chain.is_file():
        paths = [root / p["path"] for p in json.loads(chain.read_text())["programs"]]
        return [(p.name.split(".")[0], _mil_dir(p, scratch)) for p in paths], "chain"
    found = sorted({m.parent for m in root.rglob(MIL)}) or sorted(root.glob("*.mlpackage"))
    if len(found) != 1:
        raise CLIError(
            f"{root}: expected one program (model.mil, or an .mlpackage), found {len(found)}"
        )
    (where,) = found
    return [
        (where.name.split(".")[0] if where != root else "program", _mil_dir(where, scratch))
    ], ""


def _mil_dir(where: Path, scratch: Path) -> Path:
    if (where / MIL).is_file():
        return where
    if where.suffix == ".mlpackage":
        try:
            return compile_package(where, scratch / f"{where.stem}.mlmodelc").path
        except MlmodelcError as exc:
            raise CLIError(f"{where}: {exc}") from None
    raise CLIError(f"{where}: no model.mil")


def read_works(artifact: Path):

    with tempfile.TemporaryDirectory() as scratch:
        root = _unpack(artifact, Path(scratch) / "unpacked")
        programs, kind = _programs(root, Path(scratch))
        works = []
        for name, where in programs:
            weights = where / WEIGHTS
            try:
                parsed = parse_text(
                    (where / MIL).read_text(), weights if weights.is_file() else None
                )
            except MILParseError as exc:
                raise CLIError(f"{where / MIL}: {exc}") from None
            works += program_works(name, parsed.program)
    return works, kind or ("functions" if len(works) > 1 else "program")


def cmd_estimate(args) -> int:

    works, kind = read_works(Path(args.artifact))
    try:
        estimate = estimate_works(works, kind, devices_or_error(args.device), args.path)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps(estimate, indent=2))
        return 0
    for device in estimate["devices"]:
        total = (
            f"{device['latency_ms']} ms ({device['latency_ms_range'][0]}-"
            f"{device['latency_ms_range'][1]}), {device['dispatches']} dispatches"
            if "latency_ms" in device
            else "one function per call"
        )
        print(f"{device['device']}: {total}{'' if device['fits'] else ', DOES NOT FIT'}")
        for p in device["programs"]:
            why = f" ({p['why']})" if "why" in p else ""
            print(
                f"  {p['name']}: {p['latency_ms']} ms, {p['bound']}-bound, {p['flops']:,} "
                f"FLOPs, {p['weight_bytes_streamed']:,} weight bytes{why}"
            )
    return 0


def add_commands(sub) -> None:

    est = sub.add_parser("estimate", help="what a built artifact costs on each device")
    est.add_argument("artifact", help="an artifact zip (or its directory)")
    est.add_argument(
        "--device",
        action="append",
        help="a device name (repeat for several; default: a set across generations)",
    )
    est.add_argument("--path", default="coreml", choices=PATHS, help="the runtime path")
    est.add_argument("--json", action="store_true", help="the estimate as JSON")
    est.set_defaults(run=cmd_estimate)
