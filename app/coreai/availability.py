"""Whether Apple's Core AI package is installed, and which version: read from its distribution
metadata, never by importing it (the import costs ~0.3 s and ~100 MiB, paid only by a process
that builds or runs an `.aimodel`)."""

from __future__ import annotations

from app.core.toolchain import coreai_version
from app.errors import ErrorKind, FieldError

PACKAGE = "coreai-core"
# The one version tested: state handles go through its private, unversioned compiler API.
PINNED = "1.0.0b3"


def require_coreai() -> str:
    """The installed version; a 503 naming the package when it is missing (its wheels exist
    for x86_64 Linux and arm64 macOS only)."""
    found = coreai_version()
    if found is None:
        raise FieldError(
            "format",
            f'format "aimodel" needs the Python package {PACKAGE}=={PINNED} '
            "(pip install 'ane-kernel-service[coreai]'), which this service does not have",
            kind=ErrorKind.UNAVAILABLE,
            title="Core AI is not installed",
            package=PACKAGE,
        )
    return found
