"""`ane-kernels.lock`: what a manifest build produced, so a rerun can skip it and CI can check it.

Entries hold no timestamps: the same inputs give the same lock, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.digest import json_digest
from app.core.files import atomic_file

LOCK_VERSION = 1


def fingerprint(inputs: dict[str, Any]) -> str:
    return json_digest(json.dumps(inputs, sort_keys=True, separators=(",", ":")))


def read_lock(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return dict(data["kernels"])
    except (ValueError, KeyError, TypeError):
        return {}  # unreadable: treated as absent, rebuilt from scratch


def render(entries: dict[str, dict[str, Any]]) -> str:
    return (
        json.dumps(
            {"version": LOCK_VERSION, "kernels": dict(sorted(entries.items()))},
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )


def write_lock(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Atomic: a build interrupted at any point leaves the previous or the next lock, never half."""
    with atomic_file(path) as f:
        f.write(render(entries).encode())
