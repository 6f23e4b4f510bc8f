"""Where an ONNX model's files are: the model file and the external-data files its tensors name.

A tensor stored outside the model names its file by a `location` relative to the model's folder
(onnx's External Data spec: https://onnx.ai/onnx/repo-docs/ExternalData.html). That text comes
from whoever wrote the model, so it is read like a request field: a location that is absolute,
climbs out of the folder (`../`), or names a file that is not one of the model's files is refused,
naming the tensor and the location. On this machine (`ModelFiles.folder`) the folder is the model
file's own; on a service (`ModelFiles.uploaded`) it is the set of files uploaded with the model,
by the names they were uploaded under, and nothing else is ever opened.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.errors import RequestError

MODEL_FIELD = "model"


@dataclass(frozen=True)
class ModelFiles:
    """The model file (`model`, as the request names it) and the files beside it."""

    model: str  # the model file's name, as the request gives it
    model_path: Path
    folder: Path | None = None  # on this machine: any file under it may be named
    uploaded: Mapping[str, Path] | None = None  # on a service: only these, by their names

    @classmethod
    def in_folder(cls, model_path: str | Path) -> ModelFiles:
        path = Path(model_path)
        return cls(path.name, path.resolve(), folder=path.resolve().parent)

    @classmethod
    def of_uploads(cls, model: str, files: Mapping[str, Path]) -> ModelFiles:
        if model not in files:
            raise RequestError(
                MODEL_FIELD, f"{model!r} is not among the files ({', '.join(sorted(files))})"
            )
        return cls(model, files[model], uploaded=dict(files))

    def external(self, location: str, tensor: str) -> tuple[str, Path]:
        """(the normalized name, the path) of the file an external tensor's `location` names."""
        where = f"initializers.{tensor}"
        if not location or "\x00" in location:
            raise RequestError(where, f"tensor {tensor!r}: an empty external-data location")
        if location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
            raise RequestError(
                where,
                f"tensor {tensor!r}: external-data location {location!r} is absolute; it must "
                "name a file beside the model",
            )
        name = posixpath.normpath(location.replace("\\", "/"))
        if name == ".." or name.startswith("../") or name == ".":
            raise RequestError(
                where,
                f"tensor {tensor!r}: external-data location {location!r} climbs out of the "
                "model's folder",
            )
        if self.uploaded is not None:
            path = self.uploaded.get(name)
            if path is None or name == self.model:
                known = ", ".join(sorted(n for n in self.uploaded if n != self.model)) or "none"
                raise RequestError(
                    where,
                    f"tensor {tensor!r}: external-data file {location!r} is not among the files "
                    f"uploaded with the model (the others: {known})",
                )
            return name, path
        assert self.folder is not None
        path = (self.folder / name).resolve()
        if not path.is_relative_to(self.folder):
            raise RequestError(
                where,
                f"tensor {tensor!r}: external-data location {location!r} leads outside the "
                f"model's folder {self.folder}",
            )
        if not path.is_file():
            raise RequestError(
                where, f"tensor {tensor!r}: external-data file {location!r} does not exist"
            )
        return name, path
