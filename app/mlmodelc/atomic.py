"""Writing a directory all at once: build it beside the target, then rename it into place.

On any error the half-built directory is removed and the target is untouched; an existing
target is replaced only after the new one is complete (moved aside, swapped, then deleted).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.core.tempnames import temp_name


def _fresh_directory(target: Path, suffix: str) -> Path:
    """A new hidden directory beside `target`, its name saying which process made it."""
    path = target.parent / temp_name(suffix, stem=f".{target.name}")
    path.mkdir(mode=0o700)
    return path


@contextmanager
def building(target: Path) -> Iterator[Path]:
    """Yield a fresh directory to fill; on success it becomes `target`."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _fresh_directory(target, ".partial")
    try:
        yield staging
        if target.exists():
            old = _fresh_directory(target, ".old")
            os.rename(target, old / target.name)
            try:
                os.rename(staging, target)
            except OSError:
                os.rename(old / target.name, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_file(root: Path, relative: str, data: bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def copy_file(source: Path, root: Path, relative: str, *, link: bool = False) -> None:
    """`link`: a hard link where the filesystem allows it (the source is the caller's own
    scratch copy, never changed after), else a copy."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if link:
        try:
            os.link(source, path)
            return
        except OSError:
            pass  # another filesystem, or no links: copied below
    shutil.copyfile(source, path)
