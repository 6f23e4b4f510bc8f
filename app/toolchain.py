"""The versions that decide an artifact's bytes besides the request: this generator's and the
coremltools it writes protobufs with (and coreai-core for `.aimodel`). Cache keys, kernel.json and buildInfo all read them here."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from functools import cache
from importlib.metadata import PackageNotFoundError, version

from app import GENERATOR, __version__


@cache
def coremltools_version() -> str:
    return version("coremltools")


@cache
def coreai_version() -> str | None:
    """The installed coreai-core (it writes `.aimodel` bytes), None when it is not installed."""
    try:
        return version("coreai-core")
    except PackageNotFoundError:
        return None


def generator() -> dict[str, str]:
    return {"name": GENERATOR, "version": __version__}


@contextlib.contextmanager
def quiet_coremltools() -> Iterator[None]:
    """Around the first import of coremltools: on Linux it prints a "Failed to load ..." line for
    each macOS-only native module it lacks, noise for every command and log."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield
