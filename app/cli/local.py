"""The commands that run on this machine: `ops`, `compile` (without --server), `validate`, `run`,
`worker`."""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
from pathlib import Path

import numpy as np

from app import artifacts
from app.catalog_info import catalog
from app.cli.checkpoint import add_arguments as add_checkpoint_arguments
from app.cli.checkpoint import from_checkpoint
from app.cli.common import EXIT_FAILED, CLIError, architecture_list, load_weights_arg
from app.cli.remote import compile_graph_remote, compile_remote, guarded
from app.cli.summary import emit, summary_of_zip
from app.compile import CompileFailure, save_compiled, select_compiler
from app.compile.aimodelc import save_aimodelc
from app.compile.coreai_build import CoreAIBuild
from app.compile.coreai_build import available as coreai_build_available
from app.core.formats import FORMATS, PACKAGED
from app.errors import FieldError
from app.estimates import header_value, works_from_json
from app.jobs.queues import QUEUES
from app.mil import DEFAULT_TARGET, TARGETS
from app.observability import logs
from app.reference.load import ArtifactError
from app.reference.run import read_input_files, run_artifact
from app.reference.validation import InvalidArtifact, validate
from app.request import KernelRequest
from app.settings import Settings


def cmd_ops(args) -> int:

    ops = catalog()
    if args.json:
        print(json.dumps(ops, indent=2))
        return 0
    for op in ops:
        params = ", ".join(op["parameters"]["properties"])
        print(f"{op['name']:<14} {op['summary']}\n{'':<14} params: {params}")
    return 0


def cmd_compile(args) -> int:

    params = _params(args.params)
    args.quantize = None if args.quantize is None else _json_object(args.quantize, "--quantize")
    functions = None if args.functions is None else _json_object(args.functions, "--functions")
    params, weights = from_checkpoint(args, params, load_weights_arg(args.weights))
    if args.server:
        if args.random_weights is not None:
            raise CLIError("--random-weights is local only; pass --weights files to a server")
        return guarded(lambda a: compile_remote(a, params, weights, functions))(args)
    try:
        request = KernelRequest.create(
            args.op,
            params,
            weights,
            format=args.format,
            target=args.target,
            name=args.name,
            verify=args.verify,
            quantize=args.quantize,
            max_quantization_error=args.max_quantization_error,
            functions=functions,
            architectures=args.architectures,
        )
        prepared = artifacts.prepare(request, local_limits(), random_seed=args.random_weights)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    return write_and_summarize(prepared, args)


def local_limits() -> artifacts.Limits:
    """The server's per-program weight budget (ANE_MAX_PROGRAM_WEIGHT_BYTES), so that a request
    splits here as it does there; the upload limits of a server have no meaning locally."""
    return artifacts.Limits(max_program_weight_bytes=Settings().max_program_weight_bytes)


def write_and_summarize(prepared, args) -> int:
    """Write the zip (an interrupted run leaves no partial one behind), print its summary; the
    exit code."""

    output = Path(args.output)
    if prepared.request.architectures is not None:
        compile_for_devices(prepared, output)
    elif FORMATS[args.format].compiled:
        compile_locally(prepared, output)
    else:
        artifacts.save(prepared, output)
    work = works_from_json(prepared.work)
    estimate = header_value(*work) if work is not None else None
    emit(summary_of_zip(output, estimate=estimate), args.json)
    return _verified(prepared)


def compile_locally(prepared, output: Path) -> None:
    """An .mlmodelc zip from this machine's compiler backend (ANE_COMPILER: xcrun on a Mac with
    the Xcode tools, else the linux backend)."""

    settings = Settings()
    try:
        compiler = select_compiler(settings.compiler, settings.mlmodelc_profile)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if compiler is None:
        raise CLIError(f"ANE_COMPILER={settings.compiler}: no compiler backend for .mlmodelc")
    try:
        save_compiled(prepared, compiler, output, settings.compile_timeout_s)
    except CompileFailure as exc:
        raise CLIError(f"{compiler.name} compile failed: {exc.message}") from None


def compile_for_devices(prepared, output: Path) -> None:
    """The per-architecture .aimodelc set from this machine's `xcrun coreai-build` (macOS 27
    with Xcode 27); elsewhere, a farm's macOS worker makes it (--server)."""
    if not coreai_build_available():
        raise CLIError(
            "--architectures compiles with xcrun coreai-build (macOS 27 with Xcode "
            "27), which this machine lacks; add --server to compile on a farm"
        )
    try:
        save_aimodelc(
            prepared,
            CoreAIBuild(),
            list(prepared.request.architectures),
            output,
            Settings().compile_timeout_s,
        )
    except CompileFailure as exc:
        raise CLIError(f"coreai-build compile failed: {exc.message}") from None


def _verified(prepared) -> int:
    """Exit 1, naming what failed, when the verification asked for did not pass."""
    if prepared.verified is False:
        report = prepared.verification or {}
        parts = report.get("functions", {"": report})  # a package's functions: each its report
        checked = {
            f"{fn}.{k}" if fn else k: v
            for fn, r in parts.items()
            for k, v in {**r["outputs"], **r["states"]}.items()
        }
        failed = {k: v for k, v in checked.items() if not v["passed"]}
        print(f"verification failed (see verification.json): {json.dumps(failed)}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def cmd_compile_graph(args) -> int:
    """`compile-graph graph.json`: a graph request (the POST /v1/graphs body) built into one
    program; node weights inline in the file, as --weights <node>.<weight>=FILE.npy, or drawn
    with --random-weights."""

    body = _graph_file(args.graph)
    # the file is a POST /v1/graphs body: its own options hold unless a flag says otherwise
    args.format = args.format or body.get("format") or PACKAGED[0]
    args.target = args.target or body.get("target") or DEFAULT_TARGET
    args.verify = args.verify or bool(body.get("verify"))
    args.passes = body.get("passes") if args.passes is None else passes_arg(args.passes)
    weights = load_weights_arg(args.weights)
    if args.server:
        if args.random_weights is not None:
            raise CLIError("--random-weights is local only; pass --weights files to a server")
        return guarded(lambda a: compile_graph_remote(a, body, weights))(args)
    graph, inline = _split_graph_weights(body)
    try:
        request = KernelRequest.create(
            graph=graph,
            weights={**inline, **weights},
            format=args.format,
            target=args.target,
            name=args.name or body.get("name"),
            verify=args.verify,
            preflight=body.get("preflight", "warn"),
            passes=args.passes,
        )
        prepared = artifacts.prepare(request, local_limits(), random_seed=args.random_weights)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    return write_and_summarize(prepared, args)


def passes_arg(text: str):
    """--passes: a pipeline or pass name, names joined by commas (run in that order), or the
    JSON a request's `passes` takes (a list, or an object with options)."""
    if text.lstrip().startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CLIError(f"--passes is not valid JSON: {exc}") from None
    names = [n.strip() for n in text.split(",")]
    return names if len(names) > 1 else names[0]


def add_passes_argument(cmd, default: str) -> None:
    cmd.add_argument(
        "--passes",
        metavar="PIPELINE",
        help="graph passes (docs/passes.md): default, none, fuse-all, a pass, passes joined by "
        f"commas, or the request's JSON (default: {default})",
    )


def _graph_file(path: str) -> dict:
    try:
        body = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CLIError(f"{path}: cannot read a graph request: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("nodes"), list):
        raise CLIError(f"{path}: a graph request is a JSON object with inputs, nodes and outputs")
    return body


def _split_graph_weights(body: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """(the graph without its weights, the inline node weights as arrays by <node>.<weight>)."""
    graph = {k: body[k] for k in ("inputs", "nodes", "outputs", "split") if k in body}
    graph["nodes"] = []
    arrays = {}
    for i, node in enumerate(body["nodes"]):
        node = dict(node)
        for weight, value in node.pop("weights", {}).items():
            if not isinstance(value, list):
                raise CLIError(
                    f"nodes[{i}].weights.{weight}: only inline lists are read "
                    "locally (a digest needs --server)"
                )
            arrays[f"{node.get('id')}.{weight}"] = np.asarray(value, dtype=np.float32)
        graph["nodes"].append(node)
    return graph, arrays


def _params(text: str) -> dict:
    return _json_object(text, "--params")


def _json_object(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CLIError(f"{flag} must be a JSON object")
    return value


def cmd_run(args) -> int:
    """Run a kernel zip with the numerical reference; outputs go to DIR/<name>.npy."""

    try:
        inputs = read_input_files(args.input)
        result, written = run_artifact(args.zip, inputs, args.output_dir, seed=args.random_inputs)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    except ArtifactError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for path in written:
        array = np.load(path)
        print(f"wrote {path} {list(array.shape)} {array.dtype}")
    for a in result.anomalies:
        print(f"warning: {a.op} produced {a.count} {a.kind} value(s) in {a.dtype}", file=sys.stderr)
    return 0


def cmd_validate(args) -> int:

    try:
        report = validate(args.path)
    except InvalidArtifact as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"valid {report.kind}: {report.summary()}")
    return 0


def cmd_worker(args) -> int:
    # imported here: the broker's client (arq, redis) is memory every other command would carry
    from app.jobs.farm_worker import BrokerUnreachable, build_worker, check

    overrides = {"redis_url": args.redis_url} if args.redis_url else {}
    settings = Settings(**overrides)
    if args.check:
        try:
            ok, found = check(args.queue, settings)
        except BrokerUnreachable as exc:  # not healthy either; the message says why
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(found, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else EXIT_FAILED
    try:
        worker = build_worker(args.queue, settings, burst=args.burst)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    logs.configure(settings.log_level)  # JSON lines on stderr, as the API writes them
    # A worker that will not stop can say why: SIGUSR1 writes every thread's stack to its log,
    # from C, so it works while the interpreter itself is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    worker.run()
    return 0


def add_commands(sub) -> None:
    ops = sub.add_parser("ops", help="list the op catalog")
    ops.add_argument("--json", action="store_true", help="machine-readable catalog")
    ops.set_defaults(run=cmd_ops)

    comp = sub.add_parser("compile", help="build a kernel zip (locally, or on --server)")
    comp.add_argument("op")
    comp.add_argument("--params", default="{}", help="the op's parameters as a JSON object")
    comp.add_argument("--weights", action="append", default=[], metavar="NAME=FILE.npy")
    comp.add_argument("--random-weights", type=int, metavar="SEED", help="draw missing weights")
    add_checkpoint_arguments(comp)
    comp.add_argument(
        "--format",
        choices=list(FORMATS),
        default=PACKAGED[0],
        help="mlmodelc: compiled by this machine's backend (ANE_COMPILER), or by --server",
    )
    comp.add_argument("--target", choices=list(TARGETS), default=DEFAULT_TARGET)
    comp.add_argument("--name", help="model name (default: the op)")
    comp.add_argument("-o", "--output", required=True, help="the zip to write")
    comp.add_argument(
        "--verify", action="store_true", help="add verification.json (numerical reference check)"
    )
    comp.add_argument(
        "--quantize",
        metavar="JSON",
        help='compress the weight matrix, e.g. \'{"mode": "palettize", "nbits": 4}\'',
    )
    comp.add_argument(
        "--max-quantization-error",
        type=float,
        metavar="X",
        help="fail when quantizing moves an output by more (max|diff| / max|exact|)",
    )
    comp.add_argument(
        "--architectures",
        type=architecture_list,
        metavar="CHIPS",
        help="with --format aimodel: compile it for these chips of the device table, e.g. "
        "m4,a18-pro (xcrun coreai-build: on macOS 27, or a farm's macOS worker with --server)",
    )
    comp.add_argument(
        "--functions",
        metavar="JSON",
        help='several functions sharing the weights, e.g. \'{"prefill": {"seq_len": 64}, '
        '"decode": {"seq_len": 1, "mode": "decode", "cache_len": 512}}\' (ios18)',
    )
    comp.add_argument("--server", help="build on this service instead of locally")
    comp.add_argument("--api-key", help="the service's API key (default: $ANE_API_KEY)")
    comp.add_argument("--json", action="store_true", help="the build summary as one JSON object")
    comp.set_defaults(run=cmd_compile)

    graph = sub.add_parser("compile-graph", help="build a graph into one program (a zip)")
    graph.add_argument("graph", help="graph.json: the POST /v1/graphs request body")
    graph.add_argument("--weights", action="append", default=[], metavar="NODE.WEIGHT=FILE.npy")
    graph.add_argument(
        "--random-weights", type=int, metavar="SEED", help="draw the catalog nodes' missing weights"
    )
    graph.add_argument(
        "--format", choices=list(FORMATS), help=f"default: the file's format, else {PACKAGED[0]}"
    )
    graph.add_argument(
        "--target", choices=list(TARGETS), help=f"default: the file's target, else {DEFAULT_TARGET}"
    )
    graph.add_argument("--name", help="model name (default: the file's name, else graph)")
    graph.add_argument("-o", "--output", required=True, help="the zip to write")
    graph.add_argument(
        "--verify",
        action="store_true",
        help="add verification.json (also when the file says verify: true)",
    )
    add_passes_argument(graph, "the file's passes, else default")
    graph.add_argument("--server", help="build on this service instead of locally")
    graph.add_argument("--api-key", help="the service's API key (default: $ANE_API_KEY)")
    graph.add_argument("--json", action="store_true", help="the build summary as one JSON object")
    graph.set_defaults(run=cmd_compile_graph)

    run = sub.add_parser("run", help="execute a kernel zip with the numerical reference")
    run.add_argument(
        "zip", help="a kernel zip (mlpackage, mlmodelc or mil format) or its unzipped directory"
    )
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--random-inputs", type=int, metavar="SEED", help="draw inputs not given")
    run.add_argument("--output-dir", required=True, help="where to write <output>.npy")
    run.set_defaults(run=cmd_run)

    val = sub.add_parser(
        "validate", help="check a kernel zip or .mlpackage with coremltools' loader"
    )
    val.add_argument("path")
    val.set_defaults(run=cmd_validate)

    work = sub.add_parser("worker", help="run jobs from the farm's queue (arq on Redis)")
    work.add_argument(
        "--queue",
        required=True,
        choices=list(QUEUES),
        help="ane-macos: compile jobs (needs Xcode); ane-linux: generation and packaging",
    )
    work.add_argument("--redis-url", help="default: ANE_REDIS_URL")
    work.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    work.add_argument(
        "--check",
        action="store_true",
        help="exit 0 if this host's worker is heartbeating, else 1 (saying why: no heartbeat, or "
        "the broker unreachable)",
    )
    work.set_defaults(run=cmd_worker)
