"""`ane-kernels onnx MODEL.onnx -o OUT.zip`: an ONNX model imported into one program, here or on
a service (--server), with the same summary as `compile` (docs/onnx.md)."""

from __future__ import annotations

import re
from pathlib import Path

from app import artifacts
from app.cli.common import CLIError
from app.cli.local import add_passes_argument, local_limits, passes_arg, write_and_summarize
from app.cli.remote import guarded
from app.cli.summary import emit, summary_of_zip
from app.core.formats import FORMATS, PACKAGED
from app.core.names import name_problem
from app.errors import FieldError
from app.mil import DEFAULT_TARGET, TARGETS
from app.request import KernelRequest, WeightRef

_DIM = r"(\d+|\{\d+(,\d+)*\})"  # a size, or {several,sizes}: one function each
_SHAPE = re.compile(rf"^(?P<name>.+)=(?P<dims>{_DIM}(,{_DIM})*)$")


def shapes_arg(pairs: list[str]) -> dict[str, list]:
    """`--shape NAME=D0,D1,...`, each input once; one axis may be `{S0,S1,...}`."""
    shapes: dict[str, list] = {}
    for pair in pairs:
        match = _SHAPE.match(pair)
        if match is None:
            raise CLIError(f"--shape expects NAME=D0,D1,... (e.g. input_ids=1,128), got {pair!r}")
        name = match["name"]
        if name in shapes:
            raise CLIError(f"--shape {name} is given twice")
        shapes[name] = [
            [int(v) for v in d.strip("{}").split(",")] if d.startswith("{") else int(d)
            for d in re.findall(r"\{[^}]*\}|\d+", match["dims"])
        ]
    return shapes


def default_name(model: Path) -> str | None:
    """The model file's stem, when it is a valid model name (`bert.onnx` -> bert)."""
    stem = model.name.split(".")[0]
    return stem if name_problem(stem) is None else None


def cmd_onnx(args) -> int:
    model = Path(args.model)
    options = {"shapes": shapes_arg(args.shape), "io_dtype": args.io_dtype}
    name = args.name or default_name(model)
    passes = None if args.passes is None else passes_arg(args.passes)
    if args.server:
        return guarded(lambda a: _remote(a, model, options, name, passes))(args)
    from app.onnx.reader import local_files

    try:
        files = local_files(model, keep=True)  # parsed once: the import takes it
        # hashed only if asked: a local build keys no cache and records no job
        weights = {n: WeightRef.of_file(path, lazy=True) for n, path in files.items()}
        request = KernelRequest.create(
            onnx={"model": model.name, **options},
            weights=weights,
            format=args.format,
            target=args.target,
            name=name,
            verify=args.verify,
            quantize=_quantize(args.quantize),
            max_quantization_error=args.max_quantization_error,
            preflight=args.preflight,
            passes=passes,
        )
        prepared = artifacts.prepare(request, local_limits())
    except FieldError as exc:
        raise CLIError(f"{model}: {exc}") from None
    return write_and_summarize(prepared, args)


def _quantize(text: str | None) -> dict | None:
    if text is None:
        return None
    from app.cli.local import _json_object

    return _json_object(text, "--quantize")


def _remote(args, model: Path, options: dict, name: str | None, passes) -> int:
    from app.client import Client

    with Client(args.server, api_key=args.api_key) as c:
        path = c.compile_onnx(
            model,
            **options,
            format=args.format,
            target=args.target,
            name=name,
            verify=args.verify,
            passes=passes,
            quantize=_quantize(args.quantize),
            max_quantization_error=args.max_quantization_error,
            save_to=args.output,
        )
    emit(summary_of_zip(path, server=args.server), args.json)
    return 0


def add_commands(sub) -> None:
    cmd = sub.add_parser(
        "onnx", help="import an ONNX model into one program (a zip), verified against onnxruntime"
    )
    cmd.add_argument("model", help="MODEL.onnx (its external data files beside it)")
    cmd.add_argument("-o", "--output", required=True, help="the zip to write")
    cmd.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="an input's shape, fixing its dynamic axes (once per input)",
    )
    cmd.add_argument("--io-dtype", choices=("fp16", "fp32"), default="fp16", help="float I/O dtype")
    cmd.add_argument("--format", choices=list(FORMATS), default=PACKAGED[0])
    cmd.add_argument("--target", choices=list(TARGETS), default=DEFAULT_TARGET)
    cmd.add_argument("--name", help="model name (default: the file's stem)")
    cmd.add_argument(
        "--verify", action="store_true", help="add verification.json (against onnxruntime)"
    )
    cmd.add_argument(
        "--quantize",
        metavar="JSON",
        help='compress the weight matrices (MatMul, Gemm, Conv), e.g. \'{"mode": "linear", '
        '"dtype": "int8"}\'',
    )
    cmd.add_argument(
        "--max-quantization-error",
        type=float,
        metavar="X",
        help="fail when quantizing moves an output by more (max|diff| / max|exact|)",
    )
    cmd.add_argument("--preflight", choices=("warn", "strict"), default="warn")
    add_passes_argument(cmd, "default")
    cmd.add_argument("--server", help="build on this service instead of locally")
    cmd.add_argument("--api-key", help="the service's API key (default: $ANE_API_KEY)")
    cmd.add_argument("--json", action="store_true", help="the build summary as one JSON object")
    cmd.set_defaults(run=cmd_onnx)
