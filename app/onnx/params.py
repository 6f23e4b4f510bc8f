"""What an ONNX request says beside its files: which file is the model, the sizes of its dynamic
input axes, and the dtype of its float inputs and outputs; the rule a file's name follows; and
whether this installation can import ONNX at all. Imports nothing of onnx itself."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from app.core.toolchain import onnx_importer
from app.errors import ErrorKind, RequestError
from app.kernels import OpParams

ONNX_OP = "onnx"
ONNX_FILE_PATTERN = r"^[^/\\\x00]+(/[^/\\\x00]+)*$"  # and no part hidden: file_problem
OnnxDim = Annotated[int, Field(ge=1, le=1 << 20)]


class OnnxParams(OpParams):
    """An ONNX model to import (app/onnx): which of the request's files is the model, the sizes
    of its dynamic input axes, and the dtype of its float inputs and outputs."""

    model: str = Field(
        pattern=ONNX_FILE_PATTERN, max_length=255, description="the model file, among the files"
    )
    shapes: dict[
        Annotated[str, Field(min_length=1, max_length=256)],
        list[OnnxDim | Annotated[list[OnnxDim], Field(min_length=1, max_length=16)]],
    ] = Field(
        default_factory=dict,
        max_length=64,
        description="input name -> its shape (dynamic axes fixed; `--shape NAME=D0,D1,...`); "
        "one axis may list several sizes (`--shape input_ids=1,{64,128,256}`): one function per "
        "size in one package, sharing the weights",
    )
    io_dtype: Literal["fp16", "fp32"] = Field(
        "fp16", description="the float inputs' and outputs' dtype (the program computes in fp16)"
    )

    @field_validator("model")
    @classmethod
    def _model(cls, model: str) -> str:
        if file_problem(model):
            raise ValueError(file_problem(model))
        return model

    @field_validator("shapes")
    @classmethod
    def _ranks(cls, shapes: dict[str, list]) -> dict[str, list]:
        counts = set()
        for name, dims in shapes.items():
            if not 1 <= len(dims) <= 5:
                raise ValueError(f"shapes.{name}: a program input has rank 1 to 5")
            listed = [d for d in dims if isinstance(d, list)]
            if len(listed) > 1:
                raise ValueError(f"shapes.{name}: one axis may list several sizes, not two")
            if listed:
                if len(set(listed[0])) != len(listed[0]):
                    raise ValueError(f"shapes.{name}: a size listed twice in {listed[0]}")
                counts.add(len(listed[0]))
        if len(counts) > 1:
            raise ValueError(
                "shapes: the inputs that list several sizes list as many (one per function)"
            )
        return shapes

    def functions(self) -> dict[str, dict[str, list[int]]]:
        """Function name -> the shapes it takes: one function (`main`) unless an axis lists
        several sizes, then one per size, `length_<size>` after the first input listing them
        (the first the default)."""
        listed = {
            n: next(d for d in dims if isinstance(d, list))
            for n, dims in self.shapes.items()
            if any(isinstance(d, list) for d in dims)
        }
        if not listed:
            return {
                "main": {
                    n: [d for d in dims if isinstance(d, int)] for n, dims in self.shapes.items()
                }
            }
        first = next(iter(listed.values()))
        out = {}
        for i, size in enumerate(first):
            out[f"length_{size}"] = {
                n: [d[i] if isinstance(d, list) else d for d in dims]
                for n, dims in self.shapes.items()
            }
        return out


def file_problem(name: str) -> str | None:
    """Why `name` is not a model file's relative name (no folder climbed, none hidden)."""
    if not re.match(ONNX_FILE_PATTERN, name) or len(name) > 255:
        return f"{name!r} is not a file's relative name"
    if any(part.startswith(".") for part in name.split("/")):
        return f"{name!r}: no part of a file's name starts with `.` (no `..`, nothing hidden)"
    return None


def require_onnx() -> None:
    """ONNX imports need the `onnx` extra (onnx reads the model and evaluates its constant
    subgraphs, onnxruntime is what verification compares with): refused, naming it, without."""
    installed = onnx_importer()
    missing = [p for p in ("onnx", "onnxruntime") if installed[p] is None]
    if missing:
        raise RequestError(
            "onnx",
            f"ONNX imports need {' and '.join(missing)}, which this installation lacks: "
            "pip install 'ane-kernel-service[onnx]'",
            kind=ErrorKind.UNAVAILABLE,
            title="ONNX support not installed",
        )
