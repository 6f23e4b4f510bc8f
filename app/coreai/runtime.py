"""Running an `.aimodel` with Apple's runtime, in a child process (`app.coreai.child`).

    results = run_aimodel(files, [Call("main", {"x": x}, {})], timeout_s=120)
    results[0].outputs["y"], results[0].states

A failure is an `AppleRuntimeError` carrying the runtime's own message; a child killed by a
signal after writing every result (the runtime's known exit-time abort) still counts as run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.coreai.asset import write_asset
from app.coreai.exchange import ASSET, CALLS, DONE

_MESSAGE_LIMIT = 2000


class AppleRuntimeError(RuntimeError):
    """Apple's runtime failed the program: `message` is what it said."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Call:
    function: str
    inputs: dict[str, np.ndarray]
    states: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class CallResult:
    outputs: dict[str, np.ndarray]
    states: dict[str, np.ndarray]


@dataclass(frozen=True)
class RunReport:
    results: list[CallResult]
    exit_status: int  # the child's; non-zero after results means the exit-time abort struck


def run_aimodel(files: dict[str, bytes], calls: list[Call], timeout_s: float = 300.0) -> RunReport:
    """Run `calls` in order on the asset made of `files`, in a fresh child process."""
    with tempfile.TemporaryDirectory(prefix="ane-coreai-run-") as tmp:
        workdir = Path(tmp)
        _write_workdir(workdir, files, calls)
        done = _child([workdir], timeout_s)
        if not (workdir / DONE).exists():
            said = _said(done.stderr).replace(f"{workdir}/", "")  # no temporary paths
            status = (
                f"killed by signal {-done.returncode}"
                if done.returncode < 0
                else f"exit status {done.returncode}"
            )
            raise AppleRuntimeError(f"{said} ({status})" if said else status)
        return _read_results(workdir, len(calls), done.returncode)


def run_aimodels(
    runs: list[tuple[dict[str, bytes], list[Call]]], timeout_s: float = 300.0
) -> list[RunReport]:
    """Several assets, each with its calls, run one after another by one child: the runtime is
    loaded once (half a second of a short run) for a sweep over many programs. An asset the
    child did not finish, and each after it, runs again alone (`run_aimodel`), so a failure
    raises the AppleRuntimeError a run of that asset alone raises."""
    with tempfile.TemporaryDirectory(prefix="ane-coreai-runs-") as tmp:
        workdirs = [Path(tmp) / str(i) for i in range(len(runs))]
        for workdir, (files, calls) in zip(workdirs, runs, strict=True):
            workdir.mkdir()
            _write_workdir(workdir, files, calls)
        try:
            done = _child(workdirs, timeout_s * max(1, len(runs))) if runs else None
        except AppleRuntimeError:  # out of time: each runs alone, within its own time
            done = None
        reports = []
        for workdir, (files, calls) in zip(workdirs, runs, strict=True):
            if done is not None and (workdir / DONE).exists():
                reports.append(_read_results(workdir, len(calls), done.returncode))
            else:
                done = None  # what the child did after an unfinished asset is not trusted
                reports.append(run_aimodel(files, calls, timeout_s))
        return reports


def _write_workdir(workdir: Path, files: dict[str, bytes], calls: list[Call]) -> None:
    asset = write_asset(files, workdir, "model")
    assert asset.name == ASSET
    plan = []
    for i, call in enumerate(calls):
        arrays: dict[str, Any] = {f"in:{k}": v for k, v in call.inputs.items()}
        arrays |= {f"state:{k}": v for k, v in call.states.items()}
        np.savez(workdir / f"call{i}.npz", **arrays)
        plan.append({"function": call.function, "arrays": f"call{i}.npz"})
    (workdir / CALLS).write_text(json.dumps(plan))


def _child(workdirs: list[Path], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "app.coreai.child", *map(str, workdirs)],
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        raise AppleRuntimeError(f"the runtime did not finish within {timeout_s:g}s") from None


def _read_results(workdir: Path, calls: int, exit_status: int) -> RunReport:
    results = []
    for i in range(calls):
        with np.load(workdir / f"out{i}.npz") as out:
            results.append(
                CallResult(
                    {k[4:]: out[k] for k in out.files if k.startswith("out:")},
                    {k[6:]: out[k] for k in out.files if k.startswith("state:")},
                )
            )
    return RunReport(results, exit_status)


def _said(stderr: bytes) -> str:
    """The runtime's message: its stderr without the per-function load lines."""
    lines = [
        line
        for line in stderr.decode("utf-8", "replace").splitlines()
        if line.strip() and not line.startswith("ODIE [")
    ]
    text = "\n".join(lines).strip()
    return text if len(text) <= _MESSAGE_LIMIT else "…" + text[-_MESSAGE_LIMIT:]
