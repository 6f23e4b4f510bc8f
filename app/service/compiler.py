"""The seam for a .mlmodelc compiler: the build pipeline packages an .mlpackage zip, then hands it
to a `Compiler` when the request asks for `format=mlmodelc`.

No compiler is configured on a Linux host; app/compile provides the implementations (macOS
workers) and the app takes one through `create_app(compiler=...)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from app.packaging import FORMATS


@runtime_checkable
class Compiler(Protocol):
    name: str

    def compile(self, mlpackage_zip: Path, dest: Path) -> None:
        """Read the zipped .mlpackage at `mlpackage_zip`, write the zipped .mlmodelc to `dest`.
        Raise ValueError with a person-readable message when the model does not compile."""
        ...


def available_formats(compiler: Compiler | None) -> list[str]:
    return [*FORMATS, "mlmodelc"] if compiler is not None else list(FORMATS)
