"""Kernel artifacts back into the IR: the ML Program protobuf of an .mlpackage, or a model.mil
bundle, each with the weight.bin beside it.

Reading the artifact itself (not kernel.json's recipe) is the point: a package whose protobuf or
weight offsets are wrong rebuilds into a program that fails here or computes a wrong answer.
Ops are re-created through the builder (`app.mil.from_proto`), so types are checked again.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from app.language.errors import MlmodelcError
from app.mil import MILParseError, Program, parse_text
from app.mil.assemble import InPlace, WeightSource
from app.mil.from_proto import load_model
from app.mlmodelc import COREMLDATA, source_model
from app.packaging import layout


class ArtifactError(ValueError):
    """The artifact cannot be read back into a program; the message says why."""


@dataclass
class LoadedArtifact:
    kind: str  # "mlpackage", "mlmodelc" or "mil"
    program: Program


# -- artifacts ----------------------------------------------------------------------------------


class _Files:
    """Read-only access to the files of a zip or a directory, by relative posix path."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = zipfile.ZipFile(path) if path.is_file() else None

    def names(self) -> list[str]:
        if self.zip is not None:
            return [n for n in self.zip.namelist() if not n.endswith("/")]
        return [p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file()]

    def read(self, name: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(name)
        return (self.path / name).read_bytes()


class _Given:
    """An artifact's files as given: their names, and how to read one."""

    def __init__(self, names: Iterable[str], read: Callable[[str], bytes]):
        self._names, self.read = list(names), read

    def names(self) -> list[str]:
        return self._names


def open_artifact(path: str | Path) -> LoadedArtifact:
    """A kernel zip (or an unzipped .mlpackage / mil bundle / .mlmodelc directory, Apple's
    compiler's included) as a program."""
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):
        raise ArtifactError(f"{path} is neither a zip file nor a directory")
    try:
        files = _Files(path)
    except zipfile.BadZipFile as exc:
        raise ArtifactError(str(exc)) from None
    return _open(files, path.suffix == ".mlpackage" and path.is_dir(), str(path))


def open_files(
    names: Iterable[str], read: Callable[[str], bytes], label: str, *, in_place: bool = False
) -> LoadedArtifact:
    """An artifact given as its files (relative posix paths, and how to read one): a program
    read straight from a kit's zip, no copy of it on disk. `label` is its name, `.mlpackage`
    when it is a package's own files. `in_place`: the program's weights are read-only views of
    the weight file as `read` gives it (a memory map), not copies."""
    return _open(_Given(names, read), label.endswith(".mlpackage"), label, in_place)


def _open(
    files: _Files | _Given, package: bool, label: str, in_place: bool = False
) -> LoadedArtifact:
    try:
        names = set(files.names())
        roots = [n[: -len(COREMLDATA)] for n in names if n.endswith(COREMLDATA)]
        bundles = sorted(r for r in roots if r + "model.mil" in names)
        if bundles:
            program = _compiled_program(files, bundles[0], names, in_place)
            return LoadedArtifact("mlmodelc", program)
        if package:
            packages = [""]
        else:
            packages = sorted(
                {
                    str(PurePosixPath(n).parents[2])
                    for n in names
                    if n.endswith("/" + layout.MODEL_FILE)
                }
            )
        if packages:
            root = "" if packages[0] in ("", ".") else packages[0] + "/"
            blob = _blob(files, root + layout.PACKAGE_WEIGHT_FILE, names, in_place)
            return LoadedArtifact(
                "mlpackage", load_model(files.read(root + layout.MODEL_FILE), blob)
            )
        if layout.MIL_TEXT in names:
            blob = _blob(files, layout.MIL_WEIGHT_FILE, names, in_place)
            text = str(files.read(layout.MIL_TEXT), "utf-8", "strict")  # bytes or a mapped view
            default = _default_function(files, names)
            return LoadedArtifact("mil", parse_text(text, blob, default).program)
    except (MILParseError, MlmodelcError, UnicodeDecodeError, zipfile.BadZipFile, KeyError) as exc:
        raise ArtifactError(str(exc)) from None
    raise ArtifactError(f"{label} holds neither an .mlpackage, a model.mil nor an .mlmodelc")


def _blob(files: _Files | _Given, name: str, names: set[str], in_place: bool) -> WeightSource:
    if name not in names:
        return None
    data = files.read(name)
    return InPlace(data) if in_place else data


def _compiled_program(
    files: _Files | _Given, root: str, names: set[str], in_place: bool = False
) -> Program:
    """An .mlmodelc's program: the model it was compiled from, rebuilt (app/mlmodelc), with the
    bundle's weight file."""
    model, _, _ = source_model(
        files.read(root + COREMLDATA), files.read(root + "model.mil"), where=root.rstrip("/") or "."
    )
    return load_model(model, _blob(files, root + "weights/weight.bin", names, in_place))


def _default_function(files: _Files | _Given, names: set[str]) -> str | None:
    """The default function kernel.json names beside a mil bundle (model.mil names none)."""
    if layout.KERNEL_JSON not in names:
        return None
    try:
        described = json.loads(files.read(layout.KERNEL_JSON))
    except ValueError as exc:
        raise ArtifactError(f"kernel.json is not JSON: {exc}") from None
    default = described.get("default_function") if isinstance(described, dict) else None
    return default if isinstance(default, str) else None
