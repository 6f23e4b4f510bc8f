"""`ane-kernels run`: execute a kernel artifact with the reference executor and save its outputs.

Everything that can be wrong with the request (a missing file, an unknown input name, a wrong
shape) is found before anything is written; outputs are written as `<dir>/<name>.npy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from app.core.files import atomic_file
from app.errors import RequestError
from app.reference.executor import Executor, RunResult, random_inputs
from app.reference.load import open_artifact


def read_input_files(pairs: Sequence[str]) -> dict[str, np.ndarray]:
    """`NAME=FILE.npy` pairs as arrays."""
    arrays: dict[str, np.ndarray] = {}
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep or not name or not file:
            raise RequestError("--input", f"expects NAME=FILE.npy, got {pair!r}")
        if name in arrays:
            raise RequestError(f"inputs.{name}", "given twice")
        try:
            arrays[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise RequestError(f"inputs.{name}", f"cannot read {file}: {exc}") from None
    return arrays


def run_artifact(
    path: str | Path,
    inputs: Mapping[str, np.ndarray],
    output_dir: str | Path,
    *,
    seed: int | None = None,
) -> tuple[RunResult, list[Path]]:
    """Run the artifact at `path` (zip or directory) on `inputs`, drawing the ones not given
    from `seed` when it is set; write each output to `output_dir/<name>.npy`.

    Raises RequestError for a bad request and load.ArtifactError for an unreadable artifact."""
    path = Path(path)
    if not path.exists():
        raise RequestError("artifact", f"{path} does not exist")
    program = open_artifact(path).program
    fn = program.main
    given = dict(inputs)
    if seed is not None:
        drawn = random_inputs(fn, seed)
        given.update({k: v for k, v in drawn.items() if k not in given})
    result = Executor(program, function=program.default).run(given)
    out_dir = Path(output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RequestError("--output-dir", f"{out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, array in result.outputs.items():
        target = out_dir / f"{name}.npy"
        with atomic_file(target) as f:
            np.save(f, array, allow_pickle=False)
        written.append(target)
    return result, written
