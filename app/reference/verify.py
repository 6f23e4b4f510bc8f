"""verification.json: a built kernel run by the reference executor on seeded random inputs and
compared with the float64 definition of its op.

The program runs with its weights read back from the weight.bin that packaging writes, so the
report covers the artifact's offsets and dtypes as well as the op decomposition. Numbers are kept
to 4 significant digits, which keeps the report (and so the zip) the same across machines whose
BLAS libraries sum in different orders.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from app.kernels.spec import KernelSpecError
from app.packaging import Entry
from app.reference.definitions import DEFINITIONS, TOLERANCE, max_errors
from app.reference.executor import Executor, random_inputs

if TYPE_CHECKING:
    from app.kernels import KernelBuild

# The reference holds every intermediate (float64 while accumulating): keep a verification run
# to a few hundred MiB. 2^25 elements is e.g. a 4096×8192 weight or 8 heads of 2048×2048 scores.
MAX_VERIFY_ELEMENTS = 1 << 25
DISTRIBUTION = "standard normal, stored in the input's dtype"


def _largest_tensor(build: KernelBuild) -> tuple[str, int]:
    fn = build.program.main
    sizes = [(v.name, v.tensor.size) for v in fn.inputs]
    sizes += [(v.name, v.tensor.size) for op in fn.operations for v in op.outputs]
    return max(sizes, key=lambda s: s[1])


def _num(value: float) -> float | None:
    return float(f"{value:.4g}") if np.isfinite(value) else None


def _compare(got: np.ndarray, exact: np.ndarray, tolerance: float) -> dict[str, Any]:
    err, rel, scale = max_errors(got, exact)
    return {
        "max_abs_error": _num(err),
        "max_rel_error": _num(rel),
        "max_abs_exact": _num(scale),
        "tolerance": tolerance,
        "passed": bool(np.isfinite(rel) and rel <= tolerance),
    }


def verify_build(build: KernelBuild, seed: int = 0) -> dict[str, Any]:
    """Run `build` on seeded random inputs and compare with its op's float64 definition.

    Raises KernelSpecError("verify", ...) when the kernel is too large to verify here."""
    name, size = _largest_tensor(build)
    if size > MAX_VERIFY_ELEMENTS:
        raise KernelSpecError(
            "verify",
            f"tensor {name!r} has {size} elements; verification runs up to {MAX_VERIFY_ELEMENTS}",
        )
    op = build.kernel.name
    fn = build.program.main
    drawn = random_inputs(fn, seed)
    state_names = [v.name for v in fn.inputs if v.type != v.tensor]
    inputs = {k: a for k, a in drawn.items() if k not in state_names}
    states_before = {k: drawn[k] for k in state_names}

    executor = Executor.from_written_weights(build.program)
    result = executor.run(drawn)
    exact_out, exact_states = DEFINITIONS[op](build.params, inputs, build.weights, states_before)

    tolerance = TOLERANCE[op]
    outputs = {k: _compare(result.outputs[k], exact_out[k], tolerance) for k in exact_out}
    states = {k: _compare(executor.states[k], exact_states[k], tolerance) for k in exact_states}
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
                "distribution": DISTRIBUTION,
                **({"state": True} if v.name in state_names else {}),
            }
            for v in fn.inputs
        },
        "outputs": outputs,
        "states": states,
        "fp16_overflow": result.overflowed,
        "nan": result.produced_nan,
        "anomalies": [a.to_json() for a in result.anomalies],
        "passed": all(c["passed"] for c in (*outputs.values(), *states.values())),
    }


def report_entry(report: dict[str, Any]) -> Entry:
    """A verify_build report as the zip entry verification.json."""
    return Entry(
        "verification.json", (json.dumps(report, indent=2, sort_keys=True) + "\n").encode()
    )


def verification_entry(build: KernelBuild, seed: int = 0) -> Entry:
    """verification.json for `write_kernel_zip(..., extra_entries=[...])`."""
    return report_entry(verify_build(build, seed))
