"""`.mlmodelc` bundles without a Mac (app/mlmodelc): `mlmodelc` writes one from a package as a
named release of Apple's compiler writes it, `decompile` rebuilds the package a bundle (Apple's
or ours) was compiled from."""

from __future__ import annotations

from pathlib import Path

from app.cli.common import CLIError
from app.language.errors import MlmodelcError
from app.language.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from app.mlmodelc import compile_package, decompile, unobserved_note


def cmd_mlmodelc(args) -> int:

    try:
        profile = get_profile(args.coremlc_version, args.mil_version)
        bundle = compile_package(args.source, args.output, profile, weights_dir=args.weights_dir)
    except MlmodelcError as exc:
        raise CLIError(str(exc)) from None
    print(
        f"wrote {bundle.path} as {profile.describe()}, program({bundle.program_version}), "
        f"{len(bundle.files)} files"
    )
    if (note := unobserved_note(bundle)) is not None:
        print(f"note: {note}")
    return 0


def cmd_decompile(args) -> int:

    try:
        package = decompile(args.bundle, args.output)
    except MlmodelcError as exc:
        raise CLIError(str(exc)) from None
    made_by = f"; compiled by {package.profile.describe()}" if package.profile is not None else ""
    print(f"wrote {package.path} ({len(package.files)} files{made_by})")
    return 0


def add_commands(sub) -> None:

    releases = ", ".join(PROFILES)
    comp = sub.add_parser(
        "mlmodelc", help="write the .mlmodelc Apple's compiler writes for a package, on any OS"
    )
    comp.add_argument("source", type=Path, help="an .mlpackage directory, or an .mlmodel")
    comp.add_argument("-o", "--output", type=Path, required=True, help="the .mlmodelc to write")
    comp.add_argument(
        "--coremlc-version",
        help=f"the coremlcompiler release to write as (observed: {releases}; another is written "
        f"with the nearest observed release's rules; default {DEFAULT_PROFILE.coremlc_version})",
    )
    comp.add_argument("--mil-version", help="its MIL component, e.g. 3500.14.1")
    comp.add_argument(
        "--weights-dir", type=Path, help="for an .mlmodel: the folder @model_path/weights names"
    )
    comp.set_defaults(run=cmd_mlmodelc)

    dec = sub.add_parser("decompile", help="rebuild the .mlpackage an .mlmodelc was compiled from")
    dec.add_argument("bundle", type=Path, help="an .mlmodelc directory")
    dec.add_argument("-o", "--output", type=Path, required=True, help="the .mlpackage to write")
    dec.set_defaults(run=cmd_decompile)
