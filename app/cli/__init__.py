"""`ane-kernels`: the command line for the kernel compiler.

    ane-kernels ops [--json]
    ane-kernels compile OP --params '<json>' [--weights NAME=FILE.npy ...] [--random-weights SEED]
                        [--format mlpackage|mil|mlmodelc|aimodel] [--target ios18|ios17] [--name NAME]
                        [--verify] [--quantize '<json>'] -o OUT.zip
    ane-kernels compile-graph GRAPH.json [...] -o OUT.zip
    ane-kernels onnx MODEL.onnx -o OUT.zip [--shape NAME=D0,D1,...] [--io-dtype fp16|fp32]
                     [--format F] [--target T] [--verify] [--json]
    ane-kernels mlmodelc SRC.mlpackage -o OUT.mlmodelc [--coremlc-version V] [--mil-version V]
    ane-kernels decompile X.mlmodelc -o X.mlpackage
    ane-kernels validate PATH
    ane-kernels run ZIP [--input NAME=FILE.npy ...] [--random-inputs SEED] --output-dir DIR
    ane-kernels model CHECKPOINT_DIR -o KIT.zip [--format F] [--context N] [--prefill N]
                      [--device NAME] [--quantize JSON] [--kv io|state] [--verify] [--strict]
    ane-kernels generate KIT.zip --prompt-ids 1,2,3 --max-new-tokens N [--json]
    ane-kernels worker --queue ane-macos|ane-linux [--redis-url URL] [--burst] [--check]
    ane-kernels compile ... --server URL          (the same request, built by a service)
    ane-kernels jobs submit|status|wait|download|list|cancel ... [--server URL] [--json]
    ane-kernels build MANIFEST.toml [--server URL] [--out DIR] [--concurrency N] [--check] [--json]
    ane-kernels devices [--json]
    ane-kernels plan CONFIG_OR_CHECKPOINT [--device NAME] [--quantize JSON] [--context N]
                     [--prefill N] [--kv io|state] [--prompt-tokens N]
                     [--path coreml|ane-direct|coreai] [--strict] [--json]
    ane-kernels estimate ARTIFACT [--device NAME ...] [--path ...] [--json]
    ane-kernels calibrate REPORT_JSON [--rows FILE]   (a device check's measured row)

Exit codes: 0 success, 1 an artifact is invalid (or a job failed), 2 a bad request (the message
names the field), 3 `build --check`: the lock would change, 4 the service is unreachable or busy.
"""

from __future__ import annotations

import argparse
import sys

from app.cli import bundles, devices, estimate, kits, local, onnx, remote
from app.cli.common import EXIT_USAGE, CLIError, check_output
from app.settings import settings_problem


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ane-kernels", description="Apple Neural Engine kernels on demand"
    )
    sub = p.add_subparsers(dest="command", required=True)
    local.add_commands(sub)
    onnx.add_commands(sub)
    bundles.add_commands(sub)
    kits.add_commands(sub)
    remote.add_commands(sub)
    devices.add_commands(sub)
    estimate.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = settings_problem()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if getattr(args, "output", None) is not None:
            check_output(args.output)
        return args.run(args)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
