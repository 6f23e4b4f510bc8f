"""Writing a file so that readers see all of it or none of it: a temp file beside the
destination, renamed over it once complete. On any error the temp file is removed and an
existing file at the destination is left as it was.

A process also knows which temp files it is writing (`in_flight`), so that a stop signal can
remove them before the process ends (`remove_in_flight_on_stop`): a build worker stopped with its
process group would otherwise leave half a zip behind. What a hard kill leaves, the stores'
start-up sweep removes, knowing the writer from the name (app/core/tempnames.py). Scratch directories
(`scratch_dir`: a kit build's held weights, a compile's bundle) are named, tracked and swept the
same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from app.core.tempnames import owner_gone, temp_name


class Sink(Protocol):
    """Where bytes go front to back, never seeked or read: a file, a zip entry, or a wrapper
    that hashes what passes. A raw file may take fewer bytes than given (write says how many)."""

    def write(self, data: bytes | memoryview, /) -> int: ...


# What a scratch directory in the system's temp directory is called before its owner's name: the
# service's own there, so a sweep of it touches nothing else.
SYSTEM_SCRATCH_STEM = "ane"


class Stopping(RuntimeError):
    """The process is stopping on a signal: no new temp file is started."""


# The temp files this process is writing. Plain set and flag, no lock: the signal handler that
# reads them runs on the main thread between bytecodes, where a held lock would deadlock it.
_in_flight: set[Path] = set()
_stopping = False


@contextlib.contextmanager
def in_flight(path: Path) -> Iterator[Path]:
    """Mark `path` (about to be written) as this process's temp file for the block: a stop
    signal removes it. Raises `Stopping` once the process is stopping."""
    _in_flight.add(path)
    try:
        if _stopping:
            raise Stopping(f"not writing {path}: the process is stopping")
        yield path
    finally:
        _in_flight.discard(path)


def remove_in_flight() -> None:
    """Remove every temp file this process is writing, and start none after: what a stopping
    process does last."""
    global _stopping
    _stopping = True
    for path in list(_in_flight):
        remove(path)


def _remove_and_die(signum: int, frame: object) -> None:
    remove_in_flight()
    # Die of the signal itself, as without this handler: whoever waits sees how it ended.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def remove_in_flight_on_stop() -> None:
    """For a process whose work is writing files (a build worker): SIGTERM or SIGINT removes
    its temp files in flight, then ends it. Call it from the main thread."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _remove_and_die)


def discard(path: Path) -> None:
    """Remove a temporary file if it is there. For cleanup after an error: a file that cannot
    be removed (a read-only filesystem) must not hide the error being handled."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def remove(path: Path) -> None:
    """Remove a temp file or a scratch directory with all it holds, if it is there; for cleanup
    (errors are not raised, as for `discard`)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        discard(path)


@contextlib.contextmanager
def scratch_dir(suffix: str, parent: Path | None = None) -> Iterator[Path]:
    """A fresh directory in `parent` named for this process (app/core/tempnames.py), removed with all
    it holds when the block ends, or by a stop signal (`remove_in_flight`); a hard kill leaves
    it to the next sweep of `parent`. Without a `parent`, the system's temp directory, where the
    scratch of this host's ended processes is swept first (`sweep_system_scratch`)."""
    if parent is None:
        parent = Path(tempfile.gettempdir())
        sweep_system_scratch(parent)
        path = parent / temp_name(suffix, stem=SYSTEM_SCRATCH_STEM)
    else:
        path = parent / temp_name(suffix)
    with in_flight(path):
        path.mkdir(parents=True)
        try:
            yield path
        finally:
            remove(path)


def sweep_system_scratch(parent: Path) -> int:
    """Remove the service's scratch in `parent` (a temp directory shared with other programs)
    whose writer on this host has ended; how many. Anything not named by `scratch_dir` is left."""
    removed = 0
    for entry in parent.glob(f"{SYSTEM_SCRATCH_STEM}~*"):
        if owner_gone(entry.name):
            remove(entry)
            removed += 1
    return removed


def temp_beside(path: Path) -> Path:
    """A fresh hidden name in `path`'s directory (same filesystem, so the rename is atomic),
    naming this process as its writer."""
    return path.with_name(temp_name(".tmp", stem=f".{path.name}"))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, readable: bool = False) -> Iterator[BinaryIO]:
    """Open a temp file for writing; it becomes `path` when the block ends without error.
    `readable`: the file is opened for reading too (a writer that reads back what it wrote)."""
    target = Path(path)
    with in_flight(temp_beside(target)) as tmp:
        # O_EXCL with mode 0o666: the final file gets the usual umask-derived mode (mkstemp's
        # 0600 would surprise whoever reads the output).
        access = os.O_RDWR if readable else os.O_WRONLY
        flags = access | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(tmp, flags, 0o666)
        try:
            with os.fdopen(fd, "w+b" if readable else "wb") as f:
                yield f
            os.replace(tmp, target)
        except BaseException:
            discard(tmp)
            raise
