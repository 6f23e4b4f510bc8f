"""What every `ane-kernels` command shares: the user-error type, exit codes, weight files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# 0 done · 1 an artifact is invalid or a job/kernel failed · 2 bad request, manifest or usage
# (the message names the field) · 3 `build --check`: the lock would change · 4 the service is
# unreachable or failing (retry later) · 130 interrupted
EXIT_FAILED, EXIT_USAGE, EXIT_CHANGED, EXIT_UNAVAILABLE = 1, 2, 3, 4


class CLIError(Exception):
    """A user error: printed as `error: <message>` with exit code 2."""


def check_output(path: str | Path, flag: str = "-o/--output") -> None:
    """Refuse an output whose folder does not exist before any work is done (every command that
    writes `-o` checks it here, so none fails late with a traceback)."""
    folder = Path(path).parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist; create it first"
        raise CLIError(f"{flag}: {path}: {folder} {why}")


def load_weights_arg(pairs: list[str]) -> dict[str, np.ndarray]:
    """`NAME=FILE.npy` pairs as arrays."""
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


def architecture_list(text: str) -> list[str]:
    """`--architectures m4,a18-pro`: chip names of the device table, comma separated."""
    return [name.strip() for name in text.split(",") if name.strip()]
