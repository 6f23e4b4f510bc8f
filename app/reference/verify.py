"""verification.json: a built kernel run by the reference executor on seeded random inputs and
compared with the float64 definition of its op.

The program runs with its weights read back from the weight.bin that packaging writes, so the
report covers the artifact's offsets and dtypes as well as the op decomposition. Numbers are kept
to 4 significant digits, which keeps the report (and so the zip) the same across machines whose
BLAS libraries sum in different orders.

Error measure (verification.json, the tests, docs/catalog.md): for each output,
    max_rel_error = max|kernel − exact| / max|exact|
a normwise relative error: an fp16 result correct to a few units in the last place scores ~1e-3;
a wrong formula scores ~1. Each catalog op declares the bound it must meet (`tolerance`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from app.errors import RequestError
from app.graphs.split import Chain, Link
from app.kernels import ProgramBuild
from app.packaging import Entry
from app.packaging.layout import VERIFICATION_JSON
from app.reference.executor import Executor, RunResult, random_inputs

# The reference holds every intermediate (float64 while accumulating): keep a verification run
# to a few hundred MiB. 2^25 elements is e.g. a 4096×8192 weight or 8 heads of 2048×2048 scores.
MAX_VERIFY_ELEMENTS = 1 << 25
DISTRIBUTION = "standard normal, stored in the input's dtype"


def max_errors(got: np.ndarray, exact: np.ndarray) -> tuple[float, float, float]:
    """(max abs error, normwise relative error, max |exact|); non-finite results, or results of
    another shape, give inf."""
    got64, exact = np.asarray(got, np.float64), np.asarray(exact, np.float64)
    if got64.shape != exact.shape or not np.isfinite(got64).all():
        return float("inf"), float("inf"), float(np.abs(exact).max(initial=0.0))
    err = float(np.abs(got64 - exact).max(initial=0.0))
    scale = float(np.abs(exact).max(initial=0.0))
    rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
    return err, rel, scale


def _largest_tensor(build: ProgramBuild) -> tuple[str, int]:
    fn = build.program.main
    sizes = [(v.name, v.tensor.size) for v in fn.inputs]
    sizes += [(v.name, v.tensor.size) for op in fn.operations for v in op.outputs]
    return max(sizes, key=lambda s: s[1])


def _num(value: float) -> float | None:
    return float(f"{value:.4g}") if np.isfinite(value) else None


def compare(got: np.ndarray, exact: np.ndarray, tolerance: float) -> dict[str, Any]:
    err, rel, scale = max_errors(got, exact)
    shapes = {}
    if np.shape(got) != np.shape(exact):  # an import computing another shape than its model's
        shapes = {"shape": list(np.shape(got)), "expected_shape": list(np.shape(exact))}
    return {
        "max_abs_error": _num(err),
        "max_rel_error": _num(rel),
        "max_abs_exact": _num(scale),
        **shapes,
        "tolerance": tolerance,
        "passed": bool(np.isfinite(rel) and rel <= tolerance),
    }


def draw_inputs(build: ProgramBuild, seed: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The seeded inputs (and starting states) a verification runs on, with notes on those the
    op draws its own way (a cache length, RoPE tables)."""
    drawn = random_inputs(build.program.main, seed)
    return drawn, build.verification_notes(drawn, seed)


def verify_build(
    build: ProgramBuild,
    seed: int = 0,
    chain: Chain | None = None,
    max_quantization_error: float | None = None,
) -> dict[str, Any]:
    """Run `build` on seeded random inputs and compare with its op's float64 definition; a split
    graph runs as its `chain` of programs, each fed what the ones before it computed.

    With quantized weights the definition takes the weights as the program decompresses them
    (the error fp16 adds, held to the usual tolerances), and the report's `quantization` section
    compares the same outputs with the definition on the original weights (the error quantizing
    adds, held to `max_quantization_error` when given).

    Raises RequestError("verify", ...) when the kernel is too large to verify here."""
    name, size = _largest_tensor(build)
    if size > MAX_VERIFY_ELEMENTS:
        raise RequestError(
            "verify",
            f"tensor {name!r} has {size} elements; verification runs up to {MAX_VERIFY_ELEMENTS}",
        )
    op = build.op_name
    fn = build.program.main
    drawn, notes = draw_inputs(build, seed)
    state_names = [v.name for v in fn.inputs if v.type != v.tensor]
    inputs = {k: a for k, a in drawn.items() if k not in state_names}
    states_before = {k: drawn[k] for k in state_names}

    if chain is None:
        executor = Executor.from_written_weights(build.program)
        result = executor.run(drawn)
        states_after = executor.states
    else:
        result, states_after = run_chain(chain, drawn), {}
    exact_out, exact_states = build.exact(inputs, states_before)
    outputs = {k: compare(result.outputs[k], exact_out[k], build.tolerance(k)) for k in exact_out}
    states = {
        k: compare(states_after[k], exact_states[k], build.tolerance(k)) for k in exact_states
    }
    quantization = (
        {
            "quantization": _quantization(
                build, result, inputs, states_before, max_quantization_error
            )
        }
        if build.quantized
        else {}
    )
    return {
        "op": op,
        "name": build.name,
        "target": build.target.name,
        "method": (
            "the program executed with fp16 storage semantics (every op rounded to its declared "
            "dtype, weights read back from weight.bin) against the op's float64 definition"
        ),
        "error_measure": "max_rel_error = max|kernel - exact| / max|exact|, per output",
        "seed": seed,
        "inputs": {
            v.name: {
                "shape": list(v.tensor.shape),
                "dtype": v.tensor.dtype.value,
                "distribution": notes.get(v.name, DISTRIBUTION),
                **({"state": True} if v.name in state_names else {}),
            }
            for v in fn.inputs
        },
        "outputs": outputs,
        "states": states,
        "fp16_overflow": result.overflowed,
        "nan": result.produced_nan,
        "anomalies": [a.to_json() for a in result.anomalies],
        **quantization,
        "passed": all(c["passed"] for c in (*outputs.values(), *states.values()))
        and quantization.get("quantization", {}).get("passed", True),
    }


def _quantization(
    build: ProgramBuild, result: RunResult, inputs: dict, states: dict, limit: float | None
) -> dict[str, Any]:
    """The outputs against the definition on the original weights: what quantizing cost."""
    exact, _ = build.exact(inputs, states, original=True)
    outputs = {}
    for name, values in exact.items():
        err, rel, scale = max_errors(result.outputs[name], values)
        outputs[name] = {
            "max_abs_error": _num(err),
            "max_rel_error": _num(rel),
            "max_abs_exact": _num(scale),
        }
    worst = max((o["max_rel_error"] for o in outputs.values()), key=_as_float, default=0.0)
    return {
        "method": "the same outputs against the float64 definition with the weights as given, "
        "before quantization",
        "weights": {key: q.to_json() for key, q in sorted(build.quantized.items())},
        "outputs": outputs,
        "max_rel_error": worst,
        "limit": limit,
        "passed": limit is None or (worst is not None and worst <= limit),
    }


def _as_float(value: float | None) -> float:
    return float("inf") if value is None else value


def run_chain(chain: Chain, inputs: dict[str, np.ndarray]) -> RunResult:
    """Each program of a chain in order, fed the graph's inputs and the earlier programs' outputs;
    the graph's outputs and every program's anomalies."""
    produced: list[dict[str, np.ndarray]] = []
    anomalies = []

    def value(link: Link) -> np.ndarray:
        return inputs[link.name] if link.program is None else produced[link.program][link.name]

    for part, links in zip(chain.parts, chain.inputs, strict=True):
        fed = {name: value(link) for name, link in links.items()}
        result = Executor.from_written_weights(part.program).run(fed)
        produced.append(result.outputs)
        anomalies += result.anomalies
    outputs = {name: value(link) for name, link in chain.outputs.items()}
    return RunResult(outputs, anomalies)


def report_entry(report: dict[str, Any]) -> Entry:
    """A verify_build report as the zip entry verification.json."""
    return Entry(VERIFICATION_JSON, (json.dumps(report, indent=2, sort_keys=True) + "\n").encode())


def verification_entry(build: ProgramBuild, seed: int = 0) -> Entry:
    """verification.json for `write_kernel_zip(..., extra_entries=[...])`."""
    return report_entry(verify_build(build, seed))
