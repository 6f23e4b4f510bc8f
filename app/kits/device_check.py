"""A kit checked on the device it is for: every program loaded by Core ML (compute units
CPU_AND_NE), the kit's generate loop run through Core ML instead of the reference executor,
and per program where Core ML places its ops (MLComputePlan: what is not on the ANE, and
whether the ANE could have taken it), first and warm load times, per-token decode time; the
tokens and logits compared with the reference executor's on the same kit.

    report = device_check(read_zip("model.kit.zip"), CoreMLRuntime, device="m4")

`CoreMLRuntime` runs only on macOS with coremltools' native module. `StandInRuntime` is the
labelled stand-in for Linux (like the `xcrun` stand-in): the reference executor behind the same
interface, so the loop, the timing and the comparison are exercised; its report says it is a
stand-in, its placement is "not available", and its times are not a device's.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from app.compile.placement import COMPUTE_UNITS, placement_report, unavailable_reason
from app.core.files import scratch_dir
from app.errors import ErrorKind, RequestError
from app.kits.gate import compare
from app.kits.manifest import KIT_JSON
from app.kits.runner import Kit, reference_functions
from app.kits.verify import LOGITS_TOLERANCE, default_prompt
from app.planner.parts import quantize_parts
from app.planner.shape import precision_of, shape_from_config

DEFAULT_NEW_TOKENS = 8
STAND_IN = "stand-in: the project's reference executor, not Core ML (times are not a device's)"


def _functions_of(meta: Mapping[str, Any]) -> list[str | None]:
    return ["prefill", "decode"] if meta["role"] == "decoder" else [None]


class StandInRuntime:
    """The labelled stand-in: the reference executor behind Core ML's interface."""

    label = STAND_IN
    stand_in = True

    def __init__(self, kit: Kit, root: Path):
        self.make = reference_functions(kit)

    def load(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        for function in _functions_of(meta):
            self.make(meta["name"], function, {})
        first = time.perf_counter() - started
        return {
            "first_load_s": first,
            "warm_load_s": first,
            "placement": {"available": False, "reason": STAND_IN},
        }

    def functions(self, program: str, function: str | None, states: dict):
        return self.make(program, function, states)


class CoreMLRuntime:
    """Core ML itself (macOS 14.4+ with coremltools' native module): each program opened with
    compute units CPU_AND_NE, once cold and once warm; a kit's `state` KV cache as one MLState
    per decoder program, made once and passed to both of its functions."""

    label = f"Core ML ({COMPUTE_UNITS})"
    stand_in = False

    def __init__(self, kit: Kit, root: Path):
        reason = unavailable_reason()
        if reason is not None:
            raise RequestError(
                "runtime",
                f"Core ML cannot run here: {reason}",
                kind=ErrorKind.UNAVAILABLE,
                title="Core ML unavailable",
            )
        self.root, self.state = root, kit.meta["kv"] == "state"
        self.models: dict[str, dict[str | None, Any]] = {}  # program -> function -> MLModel
        self.compiled: dict[str, Path] = {}

    def _open(self, path: Path, function: str | None):
        import coremltools as ct

        options: dict[str, Any] = {"compute_units": ct.ComputeUnit.CPU_AND_NE}
        if function is not None:
            options["function_name"] = function
        if path.suffix == ".mlmodelc":
            return ct.models.CompiledMLModel(str(path), **options)
        return ct.models.MLModel(str(path), **options)

    def load(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        import coremltools as ct

        path = self.root / meta["path"]
        started = time.perf_counter()
        for function in _functions_of(meta):
            self._open(path, function)
        first = time.perf_counter() - started
        started = time.perf_counter()
        self.models[meta["name"]] = {f: self._open(path, f) for f in _functions_of(meta)}
        warm = time.perf_counter() - started
        compiled = (
            path if path.suffix == ".mlmodelc" else Path(ct.models.utils.compile_model(str(path)))
        )
        placement = {
            f or "main": placement_report(compiled, f or "main") for f in _functions_of(meta)
        }
        for report in placement.values():
            report.pop("ops", None)  # the summary (counts, warnings) goes into the report
        return {"first_load_s": first, "warm_load_s": warm, "placement": placement}

    def functions(self, program: str, function: str | None, states: dict):
        model = self.models[program][function]
        stateful = self.state and function is not None

        def run(inputs: dict) -> Mapping[str, np.ndarray]:
            if stateful:
                state = states.setdefault("mlstate", model.make_state())
                return model.predict(inputs, state=state)
            return model.predict(inputs)

        return run


Runtime = Callable[[Kit, Path], StandInRuntime | CoreMLRuntime]


def device_check(
    files: Mapping[str, bytes],
    runtime: Runtime,
    *,
    device: str,
    prompt: Sequence[int] | None = None,
    max_new_tokens: int = DEFAULT_NEW_TOKENS,
    scratch: Path | None = None,
) -> dict[str, Any]:
    """The report of one kit on one device (see the module's docstring); the kit is unpacked for
    Core ML in a scratch directory under `scratch` (app/core/files.py, `scratch_dir`)."""
    kit = Kit(files, lazy=True)  # a many-GB kit's programs are loaded when run
    if kit.meta["format"] == "mil":  # refused whatever runs the check, as docs/kits.md says
        raise RequestError(
            "kit.format",
            "a mil kit has no Core ML programs; build it with format mlpackage or mlmodelc",
        )
    prompt = list(prompt) if prompt is not None else default_prompt(kit.embeddings.shape[0], 6)
    max_new_tokens = max(1, min(max_new_tokens, kit.context + 1 - len(prompt)))
    expected, expected_logits = kit.generate(prompt, max_new_tokens)
    with scratch_dir(".check", scratch) as root:
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        rt = runtime(kit, root)
        programs = [
            {"name": p["name"], "role": p["role"], **rt.load(p)} for p in kit.meta["programs"]
        ]
        session = kit.session(rt.functions)
        started = time.perf_counter()
        hidden = session.feed(prompt)[-1]
        prefill_s = time.perf_counter() - started
        tokens, rows, steps = [], [], []
        for step in range(max_new_tokens):
            started = time.perf_counter()
            row = np.asarray(session.logits(hidden), np.float64)
            token = int(np.argmax(row))
            tokens.append(token)
            rows.append(row)
            if step < max_new_tokens - 1:
                hidden = session.feed([token])[-1]
            steps.append(time.perf_counter() - started)
    errors = [
        float(np.max(np.abs(r - e)) / max(float(np.max(np.abs(e))), 1e-30))
        for r, e in zip(rows, expected_logits, strict=True)
    ]
    decode_s = statistics.median(steps)
    arch = kit.meta["architecture"]
    model = f"{arch['model_type']} {arch['num_hidden_layers']}x{arch['hidden_size']}"
    return {
        "device": device,
        "runtime": rt.label,
        "stand_in": rt.stand_in,
        "programs": programs,
        "prompt": prompt,
        "prefill_s": prefill_s,
        "decode_s_per_token": decode_s,
        "tokens": tokens,
        "reference_tokens": expected,
        "tokens_match": tokens == expected,
        "logits_max_rel_error": max(errors),
        # the quality gate's measures (app/kits/gate.py), here of the runtime on the same kit's
        # weights: where a device fault (a palette computed wrong on the ANE) shows
        "quality": compare(np.stack(rows), np.stack(expected_logits)),
        "tolerance": LOGITS_TOLERANCE,
        "passed": tokens == expected and max(errors) <= LOGITS_TOLERANCE,
        # a measured row for the estimate's calibration (app/devices/measured.py: `ane-kernels
        # calibrate` adds it); a stand-in's is marked so it is never taken for a device's
        "calibration_row": {
            "device": device,
            "model": model,
            "shape": asdict(shape_from_config(arch)),
            "precision": _precision(kit.meta.get("quantize")),
            "context": kit.context,
            "runtime": rt.label,
            "decode_tokens_per_s": 1 / decode_s,
            "kit": hashlib.sha256(files[KIT_JSON]).hexdigest(),
            "measured": not rt.stand_in,
        },
    }


def _precision(quantize: Mapping[str, Any] | None) -> str:
    """The layers' stored precision as the estimate names it, or what it cannot model."""
    try:
        return precision_of(quantize_parts(quantize)[0]).name
    except RequestError as exc:
        return f"not modelled ({exc.message})"
