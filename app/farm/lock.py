"""`ane-kernels.lock`: what a manifest build produced, so a rerun can skip it and CI can check it.

Entries hold no timestamps: the same inputs give the same lock, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

LOCK_VERSION = 1


def fingerprint(inputs: dict[str, Any]) -> str:
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def read_lock(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return dict(data["kernels"])
    except (ValueError, KeyError, TypeError):
        return {}  # unreadable: treated as absent, rebuilt from scratch


def render(entries: dict[str, dict[str, Any]]) -> str:
    return json.dumps({"version": LOCK_VERSION, "kernels": dict(sorted(entries.items()))}, indent=2,
                      sort_keys=True) + "\n"  # fmt: skip


def write_lock(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Atomic: a build interrupted at any point leaves the previous or the next lock, never half."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(render(entries))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
