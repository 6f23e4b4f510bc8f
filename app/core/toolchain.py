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


# The ONNX importer's own version (app/onnx): bump it when an import of the same model can give
# other bytes (a lowering changed), so cached imports are not answered for it.
ONNX_IMPORTER_VERSION = 1


@cache
def onnx_importer() -> dict[str, str | int | None]:
    """What decides an ONNX import's zip: the importer, the onnx package whose reference
    implementation evaluates constant subgraphs at import, and the onnxruntime verification
    compares with."""
    found: dict[str, str | int | None] = {"importer": ONNX_IMPORTER_VERSION}
    for package in ("onnx", "onnxruntime"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found
