"""The `.aimodel` of a request run by Apple's own runtime (coreai-core's CPU runtime, in a
child process) and compared with the float64 definition: a second executor, independent of the
project's, beside it in verification.json (`apple_runtime`).

Each function runs on the seeded inputs the reference executor gets, so the two reports are
comparable line by line. Tolerances are the op's, widened where the program keeps an fp16
`batch_matmul` of two activations: Apple's CPU runtime accumulates those in fp16 (4096 ones sum
to 2048), so each adds K·2⁻¹¹ for its inner dimension K, the bound of summing K terms in fp16.
The report says so (`fp16_accumulation`). Linears are convolutions and accumulate in fp32.
"""

from __future__ import annotations

from typing import Any

from app.coreai import (
    AppleRuntimeError,
    Call,
    RunReport,
    aimodel_files,
    coreai_version,
    run_aimodel,
    run_aimodels,
    translate,
)
from app.coreai.step import is_weight
from app.errors import RequestError
from app.kernels import ProgramBuild
from app.mil import DType, Program
from app.reference.verify import compare, draw_inputs

FP16_UNIT = 2.0**-11  # unit roundoff of fp16


def fp16_accumulations(program: Program) -> list[int]:
    """Inner dimensions of the fp16 matmuls of two activations (kept as batch_matmul), and of
    attention's two products, in program order."""
    dims: list[int] = []
    for fn in program.functions.values():
        for op in fn.operations:
            if op.type == "matmul":
                x, y = op.var("x"), op.var("y")
                if is_weight(x) or is_weight(y) or x.tensor.dtype is not DType.FP16:
                    continue
                transposed = op.var("transpose_x").op if "transpose_x" in op.inputs else None
                value = transposed.value if transposed is not None else None
                dims.append(
                    x.tensor.shape[-2] if value and bool(value.stored()) else x.tensor.shape[-1]
                )
            elif op.type == "scaled_dot_product_attention":
                q, k = op.var("query"), op.var("key")
                if q.tensor.dtype is DType.FP16:
                    dims += [q.tensor.shape[-1], k.tensor.shape[-2]]
    return dims


def apple_report(
    build: ProgramBuild, files: dict[str, bytes] | None = None, seed: int = 0
) -> dict[str, Any]:
    """Run the `.aimodel` (`files`, else translated from `build`) with Apple's runtime and compare
    every function's outputs and states with the definition. Raises AppleRuntimeError."""
    files, calls, expected = _planned(build, files, seed)
    return _report(build, run_aimodel(files, calls), expected, seed)


def apple_reports(builds: list[ProgramBuild], seed: int = 0) -> list[dict[str, Any]]:
    """`apple_report` of each build, all run by one child process (`run_aimodels`): a sweep pays
    for loading the runtime once."""
    planned = [_planned(build, None, seed) for build in builds]
    runs = run_aimodels([(files, calls) for files, calls, _ in planned])
    return [
        _report(build, run, expected, seed)
        for build, run, (_, _, expected) in zip(builds, runs, planned, strict=True)
    ]


def _parts(build: ProgramBuild) -> dict[str, Any]:
    """The build of each function by name (a build of several has `parts`; one is its own)."""
    return getattr(build, "parts", None) or {build.program.default: build}


def _planned(
    build: ProgramBuild, files: dict[str, bytes] | None, seed: int
) -> tuple[dict[str, bytes], list[Call], list[Any]]:
    """The asset's files, a call per function on the reference's seeded inputs, and what the
    definition gives for each."""
    files = files if files is not None else aimodel_files(translate(build.program))
    calls, expected = [], []
    for name, part in _parts(build).items():
        drawn, _ = draw_inputs(part, seed)
        fn = part.program.main
        states = {v.name: drawn[v.name] for v in fn.inputs if v.type != v.tensor}
        inputs = {k: a for k, a in drawn.items() if k not in states}
        calls.append(Call(name, inputs, states))
        expected.append(part.exact(inputs, states))
    return files, calls, expected


def _report(build: ProgramBuild, run: RunReport, expected: list[Any], seed: int) -> dict[str, Any]:
    """Apple's results against the definition's, within each output's tolerance."""
    parts = _parts(build)
    dims = fp16_accumulations(build.program)
    allowance = float(sum(dims) * FP16_UNIT)
    functions = {}
    for (name, part), result, (exact_out, exact_states) in zip(
        parts.items(), run.results, expected, strict=True
    ):
        outputs = {
            k: compare(result.outputs[k], v, part.tolerance(k) + allowance)
            for k, v in exact_out.items()
        }
        held = {
            k: compare(result.states[k], v, part.tolerance(k) + allowance)
            for k, v in exact_states.items()
        }
        functions[name] = {
            "outputs": outputs,
            "states": held,
            "passed": all(c["passed"] for c in (*outputs.values(), *held.values())),
        }
    report: dict[str, Any] = {
        "runtime": f"coreai-core {coreai_version()} CPU runtime, in a child process",
        "method": "the .aimodel's bytes run by Apple's runtime on the reference's seeded inputs, "
        "against the op's float64 definition",
        "seed": seed,
        "fp16_accumulation": {
            "batch_matmul_inner_dims": dims,
            "tolerance_added": float(f"{allowance:.4g}"),
            "why": "Apple's CPU runtime accumulates fp16 batch_matmul in fp16: K·2^-11 per product",
        },
        "functions": functions,
        "passed": all(f["passed"] for f in functions.values()),
    }
    if run.exit_status != 0:
        report["child_exit_status"] = run.exit_status
        report["note"] = "the runtime aborted at exit after writing every result (a known bug)"
    return report


def with_apple_runtime(
    report: dict[str, Any], build: ProgramBuild, files: dict[str, bytes]
) -> dict[str, Any]:
    """The reference report with Apple's beside it (`apple_runtime`) and how the two agree: each
    output's error under both executors, passed only when both pass. A runtime failure is a
    clear error carrying the runtime's message."""
    try:
        apple = apple_report(build, files)
    except AppleRuntimeError as exc:
        raise RequestError(
            "verify",
            f"Apple's runtime failed the .aimodel: {exc.message}",
            title="Core AI runtime failed",
        ) from None
    reference = report.get("functions") or {build.program.default: report}
    outputs = {}
    for fn, ran in apple["functions"].items():
        for kind in ("outputs", "states"):
            for name, check in ran[kind].items():
                ours = reference[fn][kind][name]
                key = f"{fn}.{name}" if "functions" in report else name
                outputs[key] = {
                    "reference_max_rel_error": ours["max_rel_error"],
                    "apple_runtime_max_rel_error": check["max_rel_error"],
                    "both_passed": ours["passed"] and check["passed"],
                }
    agreement = {
        "method": "each output and state checked against the same float64 definition by both "
        "executors, on the same seeded inputs",
        "outputs": outputs,
        "both_passed": all(o["both_passed"] for o in outputs.values()),
    }
    return {
        **report,
        "apple_runtime": apple,
        "agreement": agreement,
        "passed": bool(report["passed"] and apple["passed"]),
    }
