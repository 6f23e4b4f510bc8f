"""An `.aimodel` written so the same program gives the same bytes in any process.

What the library leaves to chance is fixed here: constants' blob names come from
`app.coreai.weights` (in program order, not hashed with an address-dependent seed), source
locations (file names and line numbers of the code that built the program) are stripped, and
metadata.json is rewritten without its creation time, keys sorted. main.hash (the sha256 of
main.mlirb) follows from the program bytes.

    files = aimodel_files(translate(program))   # {"main.mlirb": b"...", ...}
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

MLIRB = "main.mlirb"
HASH = "main.hash"
METADATA = "metadata.json"
SUFFIX = ".aimodel"


def strip_locations(ai_program) -> None:
    """Replace every source location in the program with an unknown one, in place."""
    from coreai._compiler.passmanager import PassManager

    module = ai_program._module._mlir_module
    with module.context:
        PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)


def aimodel_files(ai_program) -> dict[str, bytes]:
    """The asset's files by name (the inside of `<name>.aimodel/`)."""
    strip_locations(ai_program)
    with tempfile.TemporaryDirectory(prefix="ane-aimodel-") as tmp:
        path = Path(tmp) / f"program{SUFFIX}"
        ai_program.save_asset(path)
        files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}
    metadata = json.loads(files[METADATA])
    metadata.pop("creationDate", None)
    files[METADATA] = (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode()
    return files


def write_asset(files: dict[str, bytes], directory: Path, name: str) -> Path:
    """`files` as `directory/<name>.aimodel/`; returns its path."""
    path = directory / f"{name}{SUFFIX}"
    path.mkdir(parents=True)
    for file, data in files.items():
        (path / file).write_bytes(data)
    return path
