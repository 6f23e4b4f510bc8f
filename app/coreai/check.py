"""`ane-kernels validate` on an `.aimodel`: its files hang together (main.hash is the sha256 of
main.mlirb, metadata.json parses), and Apple's own compiler lowers it and its runtime loads it
(in a child process, as every run of the runtime here)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from app.core.toolchain import coreai_version
from app.coreai.asset import HASH, METADATA, MLIRB
from app.coreai.runtime import AppleRuntimeError, run_aimodel


def check_aimodel(asset: Path) -> list[str]:
    """Notes on what was checked; ValueError naming what is wrong."""
    files = {}
    for name in (MLIRB, HASH, METADATA):
        if not (asset / name).is_file():
            raise ValueError(f"no {name}")
        files[name] = (asset / name).read_bytes()
    if hashlib.sha256(files[MLIRB]).digest() != files[HASH]:
        raise ValueError(f"{HASH} is not the sha256 of {MLIRB}")
    try:
        json.loads(files[METADATA])
    except ValueError as exc:
        raise ValueError(f"{METADATA} is not JSON: {exc}") from None
    notes = [f"{HASH} matches {MLIRB} ({len(files[MLIRB])} bytes)"]
    version = coreai_version()
    if version is None:
        return [*notes, "not loaded: coreai-core is not installed (the coreai extra)"]
    try:
        run_aimodel(files, [])
    except AppleRuntimeError as exc:
        raise ValueError(f"Apple's runtime could not load it: {exc.message}") from None
    return [*notes, f"lowered and loaded by coreai-core {version}'s runtime"]
