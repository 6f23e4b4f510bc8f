"""Storage faults as errors a person can act on: which store, which directory, how many bytes.

A write into one of the service's stores can fail because the filesystem is full or over quota
(ENOSPC, EDQUOT: kind STORAGE, 507 at the HTTP edge) or because the directory cannot be written
at all (EROFS, EACCES, EPERM: kind UNAVAILABLE, 503; no amount of room helps until an operator
remounts the volume or fixes its permissions). Both name the store and the directory; a full one
also says how many bytes the operation needed and how many were free. Any other OSError is left
as it is: it is not a storage condition this module can describe.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from app.errors import ErrorKind, FieldError, ServiceError

# The stores' names, as errors and logs spell them.
ARTIFACT_STORE = "artifact cache"
BLOB_STORE = "blob store"
WORK_DIR = "job scratch directory"

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still put on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def same_filesystem(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_dev == b.stat().st_dev
    except OSError:
        return False


def _directory(exc: OSError, fallback: Path) -> Path:
    """The directory the failed call wrote into (its file's parent), else the store's root."""
    name = exc.filename
    if isinstance(name, str | bytes | os.PathLike):
        path = Path(os.fsdecode(name))
        return path if path.is_dir() else path.parent
    return fallback


def _free(directory: Path) -> int | None:
    try:
        return free_bytes(directory)
    except OSError:
        return None


def store_full(
    store: str,
    directory: Path,
    needed: int | None,
    free: int | None = None,
    code: int = errno.ENOSPC,
) -> ServiceError:
    """The 507 of a store whose filesystem cannot take `needed` more bytes."""
    free = _free(directory) if free is None else free
    quota = "over its quota" if code == errno.EDQUOT else "out of space"
    need = f"this needs about {needed} bytes" if needed else "this needed more room than it had"
    have = f"; {free} bytes are free now" if free is not None else ""
    return ServiceError(
        f"the {store} ({directory}) is {quota}: {need}{have}; retry once space has been freed",
        kind=ErrorKind.STORAGE,
        title="Storage full",
        store=store,
        directory=str(directory),
        needed_bytes=needed,
        free_bytes=free,
        errno=errno.errorcode.get(code, str(code)),
    )


def store_unwritable(store: str, directory: Path, exc: OSError) -> ServiceError:
    """The 503 of a store whose directory cannot be written (read-only, forbidden)."""
    code = exc.errno if exc.errno is not None else errno.EACCES
    why = (
        "is on a read-only filesystem" if code == errno.EROFS else "is not writable by the service"
    )
    return ServiceError(
        f"the {store} directory {directory} {why} ({errno.errorcode.get(code, code)}: "
        f"{os.strerror(code)}); an operator must make it writable",
        kind=ErrorKind.UNAVAILABLE,
        title="Storage not writable",
        store=store,
        directory=str(directory),
        errno=errno.errorcode.get(code, str(code)),
    )


def storage_fault(
    exc: OSError, store: str, root: Path, needed: int | None = None
) -> FieldError | None:
    """`exc` described as a storage fault of `store` (rooted at `root`), or None when it is no
    such fault (a missing file, an I/O error)."""
    if exc.errno in FULL:
        return store_full(store, _directory(exc, root), needed, code=exc.errno)
    if exc.errno in UNWRITABLE:
        return store_unwritable(store, _directory(exc, root), exc)
    return None


@contextlib.contextmanager
def storage_errors(store: str, root: Path, needed: int | None = None) -> Iterator[None]:
    """Raise a storage fault's error in place of the OSError that stands for it."""
    try:
        yield
    except OSError as exc:
        fault = storage_fault(exc, store, root, needed)
        if fault is None:
            raise
        raise fault from exc


def is_full(error: BaseException) -> bool:
    """Whether `error` is a store-full fault (eviction might make room for another try)."""
    return (
        isinstance(error, FieldError) and error.kind == ErrorKind.STORAGE and "store" in error.extra
    )
