"""Writing a file so that readers see all of it or none of it: a temp file beside the
destination, renamed over it once complete. On any error the temp file is removed and an
existing file at the destination is left as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from app.ids import random_hex


def discard(path: Path) -> None:
    """Remove a temporary file if it is there. For cleanup after an error: a file that cannot
    be removed (a read-only filesystem) must not hide the error being handled."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def temp_beside(path: Path) -> Path:
    """A fresh hidden name in `path`'s directory (same filesystem, so the rename is atomic)."""
    return path.with_name(f".{path.name}.{random_hex()[:12]}.tmp")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temp file for writing; it becomes `path` when the block ends without error."""
    target = Path(path)
    tmp = temp_beside(target)
    # O_EXCL with mode 0o666: the final file gets the usual umask-derived mode (mkstemp's 0600
    # would surprise whoever reads the output).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
