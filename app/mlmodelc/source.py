"""Reading the compiler's input: an `.mlpackage` directory, or an `.mlmodel` with its weights.

In a package, `Manifest.json`'s root item names the spec file (normally
`Data/com.apple.CoreML/model.mlmodel`); `@model_path` in BLOBFILE paths is that file's folder.
A bare `.mlmodel` takes `@model_path` to be its own folder; a weights directory, when given,
stands for `@model_path/weights`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from app.language.errors import BadPackageError
from app.language.messages import Model_pb2
from app.mlmodelc.blobrefs import confined
from app.mlmodelc.wire import read_fields

DATA_DIR = "Data"
DEFAULT_SPEC = "com.apple.CoreML/model.mlmodel"


@dataclass(frozen=True)
class SourceModel:
    model_bytes: bytes  # the spec file, as stored (its SHA-256 goes into analytics)
    model: Model_pb2.Model
    description: bytes  # the ModelDescription field's bytes, as stored
    model_name: str  # the spec file's stem ("model")
    model_path: Path  # what "@model_path" stands for
    label: str  # the source's path, for messages
    weights_dir: Path | None = None  # stands for "@model_path/weights" when given

    def locate(self, relative: str) -> Path:
        """The file a path relative to `@model_path` names, confined to its folder (symlinks
        resolved); ValueError when it leads outside."""
        head, _, rest = relative.partition("/")
        if self.weights_dir is not None and head == "weights" and rest:
            return confined(self.weights_dir, rest)
        return confined(self.model_path, relative)


def _spec_in_package(package: Path) -> Path:
    manifest = package / "Manifest.json"
    if not manifest.is_file():
        spec = package / DATA_DIR / DEFAULT_SPEC
        if spec.is_file():
            return spec
        raise BadPackageError(
            "no Manifest.json and no Data/com.apple.CoreML/model.mlmodel", str(package)
        )
    try:
        info = json.loads(manifest.read_text("utf-8"))
        root = info["rootModelIdentifier"]
        relative = info["itemInfoEntries"][root]["path"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadPackageError(
            f"Manifest.json does not name a root model ({exc})", str(manifest)
        ) from None
    spec = package / DATA_DIR / relative
    if not spec.is_file():
        raise BadPackageError(f"the manifest's root model {relative!r} is missing", str(package))
    return spec


def read_source(src: Path, weights_dir: Path | None = None) -> SourceModel:
    """Load and check the model: it must parse and be an ML Program."""
    src = Path(src)
    if src.is_dir():
        spec = _spec_in_package(src)
        model_path = spec.parent
    elif src.is_file():
        spec = src
        model_path = src.parent
        if weights_dir is not None and not Path(weights_dir).is_dir():
            raise BadPackageError("weights directory does not exist", str(weights_dir))
    else:
        raise BadPackageError("no such package or model file", str(src))
    if weights_dir is not None and src.is_dir():
        raise BadPackageError("a weights directory goes with an .mlmodel, not a package", str(src))
    data = spec.read_bytes()
    label = str(spec)
    if data[:4] == b"PK\x03\x04":  # a zip (a kernel zip the service wrote), not a protobuf
        raise BadPackageError(
            "a zip, not a model: unzip it and pass the .mlpackage directory inside "
            f"(unzip {src.name} -d {src.stem} && ane-kernels mlmodelc {src.stem}/<name>.mlpackage "
            "-o <name>.mlmodelc)",
            label,
        )
    model = Model_pb2.Model()
    try:
        model.ParseFromString(data)
        fields = read_fields(data)
    except (DecodeError, ValueError) as exc:
        raise BadPackageError(f"not a Core ML model protobuf ({exc})", label) from None
    kind = model.WhichOneof("Type")
    if kind != "mlProgram":
        raise BadPackageError(f"not an ML Program (the model is {kind or 'empty'})", label)
    if model.specificationVersion < 6:
        raise BadPackageError(
            f"specification version {model.specificationVersion}: ML Programs need 6 or later",
            label,
        )
    if not model.mlProgram.functions:
        raise BadPackageError("the ML Program has no function", label)
    descriptions = [f.payload for f in fields if f.number == 2]
    return SourceModel(
        model_bytes=data,
        model=model,
        description=descriptions[-1] if descriptions else b"",
        model_name=spec.stem,
        model_path=model_path,
        label=label,
        weights_dir=Path(weights_dir) if weights_dir is not None else None,
    )
