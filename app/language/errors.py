"""Errors of the `.mlmodelc` writer and reader: each names what is wrong and where.

Every exception derives from `MlmodelcError`, whose `where` says the file (and op, field or
line:column) at fault, so a caller can answer 4xx / exit 2 with a message the user can act on.
"""

from __future__ import annotations


class MlmodelcError(Exception):
    """Base class: `message` says what is wrong, `where` the file / op / field it is in."""

    def __init__(self, message: str, where: str = "") -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class BadPackageError(MlmodelcError):
    """The source is not a readable ML Program package (missing file, bad protobuf, NN model)."""


class WeightFileError(MlmodelcError):
    """A BLOBFILE reference that cannot be satisfied: file absent, offset past its end, bad entry."""


class UnknownProfileError(MlmodelcError):
    """The toolchain profile asked for is not one this writer knows how to emulate."""


class UnsupportedConstructError(MlmodelcError):
    """A construct whose Apple spelling has never been observed, refused rather than guessed."""


class MilSyntaxError(MlmodelcError):
    """`model.mil` text that does not parse; `line` and `column` are 1-based."""

    def __init__(self, message: str, line: int, column: int, source: str = "model.mil") -> None:
        self.line = line
        self.column = column
        super().__init__(message, f"{source}:{line}:{column}")


class BadBundleError(MlmodelcError):
    """A compiled `.mlmodelc` directory that cannot be read back (missing or corrupt file)."""
