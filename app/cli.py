"""`ane-kernels`: the command line for the kernel compiler.

    ane-kernels ops [--json]
    ane-kernels compile OP --params '<json>' [--weights NAME=FILE.npy ...] [--random-weights SEED]
                        [--format mlpackage|mil] [--target ios18|ios17] [--name NAME] [--verify]
                        -o OUT.zip
    ane-kernels validate PATH
    ane-kernels run ZIP [--input NAME=FILE.npy ...] [--random-inputs SEED] --output-dir DIR
    ane-kernels worker --queue ane-macos|ane-linux [--redis-url URL] [--burst] [--check]
    ane-kernels compile ... --server URL          (the same request, built by a service)
    ane-kernels jobs submit|status|wait|download|list|cancel ... [--server URL] [--json]
    ane-kernels build MANIFEST.toml [--server URL] [--out DIR] [--concurrency N] [--check] [--json]

Exit codes: 0 success, 1 an artifact is invalid (or a job failed), 2 a bad request (the message
names the field), 3 `build --check`: the lock would change, 4 the service is unreachable or busy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

EXIT_INVALID = 1
EXIT_USAGE = 2


class CLIError(Exception):
    """A user error: printed as `error: <message>` with exit code 2."""


def load_weights_arg(pairs: list[str]) -> dict[str, np.ndarray]:
    weights = {}
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep or not name or not file:
            raise CLIError(f"--weights expects NAME=FILE.npy, got {pair!r}")
        try:
            weights[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CLIError(f"weights.{name}: cannot read {file}: {exc}") from None
    return weights


def _cmd_ops(args) -> int:
    from app.catalog_info import catalog

    ops = catalog()
    if args.json:
        print(json.dumps(ops, indent=2))
        return 0
    for op in ops:
        params = ", ".join(op["parameters"]["properties"])
        print(f"{op['name']:<14} {op['summary']}\n{'':<14} params: {params}")
    return 0


def _cmd_compile(args) -> int:
    from app.kernels import KernelSpecError, build_kernel
    from app.packaging import write_kernel_zip

    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise CLIError(f"--params is not valid JSON: {exc}") from None
    if not isinstance(params, dict):
        raise CLIError("--params must be a JSON object")
    if args.server:
        from app.cli_remote import compile_remote, guarded

        if args.random_weights is not None:
            raise CLIError("--random-weights is local only; pass --weights files to a server")
        return guarded(lambda a: compile_remote(a, params, load_weights_arg(a.weights)))(args)
    if args.format == "mlmodelc":
        raise CLIError(
            "format mlmodelc needs a compiler: use --server URL (a macOS worker compiles it)"
        )
    try:
        build = build_kernel(
            args.op,
            params,
            load_weights_arg(args.weights),
            target=args.target,
            name=args.name,
            random_seed=args.random_weights,
        )
    except KernelSpecError as exc:
        raise CLIError(str(exc)) from None
    report, extra = _verification(build) if args.verify else (None, [])
    out = Path(args.output)
    # Write next to the destination and rename: an interrupted run leaves no partial zip behind.
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent if str(out.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as f:
            write_kernel_zip(build, f, args.format, extra_entries=extra)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    if report is not None and not report["passed"]:
        checked = {**report["outputs"], **report["states"]}
        failed = {k: v for k, v in checked.items() if not v["passed"]}
        print(f"verification failed (see verification.json): {json.dumps(failed)}", file=sys.stderr)
        return EXIT_INVALID
    return 0


def _verification(build) -> tuple[dict, list]:
    """compile --verify: the reference report and its zip entry (a too-large kernel is exit 2)."""
    from app.kernels import KernelSpecError
    from app.reference.verify import report_entry, verify_build

    try:
        report = verify_build(build)
    except KernelSpecError as exc:
        raise CLIError(str(exc)) from None
    return report, [report_entry(report)]


def _cmd_run(args) -> int:
    """Run a kernel zip with the numerical reference; outputs go to DIR/<name>.npy."""
    import contextlib
    import io

    # coremltools prints "Failed to load ..." lines at import on Linux; keep the output clean.
    with contextlib.redirect_stderr(io.StringIO()):
        from app.reference import ExecutionError
        from app.reference.load import ArtifactError
        from app.reference.run import read_input_files, run_artifact

    try:
        inputs = read_input_files(args.input)
        result, written = run_artifact(args.zip, inputs, args.output_dir, seed=args.random_inputs)
    except ExecutionError as exc:
        raise CLIError(str(exc)) from None
    except ArtifactError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for path in written:
        array = np.load(path)
        print(f"wrote {path} {list(array.shape)} {array.dtype}")
    for a in result.anomalies:
        print(f"warning: {a.op} produced {a.count} {a.kind} value(s) in {a.dtype}", file=sys.stderr)
    return 0


def _cmd_validate(args) -> int:
    from app.validation import InvalidArtifact, validate

    try:
        report = validate(args.path)
    except InvalidArtifact as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(f"valid {report.kind}: {report.ops} ops, {report.weights} weight blobs")
    return 0


def _cmd_worker(args) -> int:
    from app.jobs import JobSettings
    from app.jobs.worker import build_worker, healthy

    overrides = {"redis_url": args.redis_url} if args.redis_url else {}
    if args.check:
        return 0 if healthy(args.queue, JobSettings(**overrides)) else EXIT_INVALID
    try:
        worker = build_worker(args.queue, JobSettings(**overrides), burst=args.burst)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    worker.run()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ane-kernels", description="Apple Neural Engine kernels on demand"
    )
    sub = p.add_subparsers(dest="command", required=True)

    ops = sub.add_parser("ops", help="list the op catalog")
    ops.add_argument("--json", action="store_true", help="machine-readable catalog")
    ops.set_defaults(run=_cmd_ops)

    comp = sub.add_parser("compile", help="build a kernel zip (locally, or on --server)")
    comp.add_argument("op")
    comp.add_argument("--params", default="{}", help="the op's parameters as a JSON object")
    comp.add_argument("--weights", action="append", default=[], metavar="NAME=FILE.npy")
    comp.add_argument("--random-weights", type=int, metavar="SEED", help="draw missing weights")
    comp.add_argument(
        "--format",
        choices=["mlpackage", "mil", "mlmodelc"],
        default="mlpackage",
        help="mlmodelc needs --server with a compiler",
    )
    comp.add_argument("--target", choices=["ios18", "ios17"], default="ios18")
    comp.add_argument("--name", help="model name (default: the op)")
    comp.add_argument("-o", "--output", required=True, help="the zip to write")
    comp.add_argument(
        "--verify", action="store_true", help="add verification.json (numerical reference check)"
    )
    comp.add_argument("--server", help="build on this service instead of locally")
    comp.add_argument("--api-key", help="the service's API key (default: $ANE_API_KEY)")
    comp.set_defaults(run=_cmd_compile)

    run = sub.add_parser("run", help="execute a kernel zip with the numerical reference")
    run.add_argument("zip", help="a kernel zip (mlpackage or mil format) or its unzipped directory")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--random-inputs", type=int, metavar="SEED", help="draw inputs not given")
    run.add_argument("--output-dir", required=True, help="where to write <output>.npy")
    run.set_defaults(run=_cmd_run)

    val = sub.add_parser(
        "validate", help="check a kernel zip or .mlpackage with coremltools' loader"
    )
    val.add_argument("path")
    val.set_defaults(run=_cmd_validate)

    work = sub.add_parser("worker", help="run jobs from the farm's queue (arq on Redis)")
    work.add_argument(
        "--queue",
        required=True,
        choices=["ane-macos", "ane-linux"],
        help="ane-macos: compile jobs (needs Xcode); ane-linux: generation and packaging",
    )
    work.add_argument("--redis-url", help="default: ANE_REDIS_URL")
    work.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    work.add_argument(
        "--check", action="store_true", help="exit 0 if this host's worker is heartbeating, else 1"
    )
    work.set_defaults(run=_cmd_worker)

    from app.cli_remote import add_commands

    add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
