"""The POST /v1/onnx body: a model's files by the digests of their uploaded blobs, and the
import's options (docs/onnx.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.core.digest import DIGEST_PATTERN
from app.schemas.wire import Passes, RequestOptions

Digest = Annotated[str, Field(pattern=DIGEST_PATTERN)]


class OnnxBody(RequestOptions):
    files: dict[Annotated[str, Field(min_length=1, max_length=255)], Digest] = Field(
        min_length=1,
        max_length=1024,
        description="the model and its external-data files, by the names the model uses for "
        "them, each the digest of a blob uploaded with /v1/blobs/uploads",
        examples=[{"model.onnx": "sha256:" + "0" * 64, "model.onnx.data": "sha256:" + "1" * 64}],
    )
    model: str | None = Field(
        None, max_length=255, description="which file is the model (default: the one *.onnx)"
    )
    shapes: dict[Annotated[str, Field(max_length=256)], list[int | list[int]]] = Field(
        default_factory=dict,
        description="input name -> its shape, fixing its dynamic axes; one axis may list several "
        "sizes ([1, [64, 128, 256]]): one function per size in one package, sharing the weights",
        examples=[{"input_ids": [1, 128]}],
    )
    io_dtype: Literal["fp16", "fp32"] = Field(
        "fp16", description="float inputs' and outputs' dtype"
    )
    passes: Passes = None
    quantize: dict[str, Any] | None = Field(
        None,
        description="compress the model's weight matrices (MatMul, Gemm, Conv) as a kernel's: "
        "palettize, linear or prune (docs/quantization.md)",
        examples=[{"mode": "linear", "dtype": "int8"}],
    )


class OnnxSpec(OnnxBody):
    """The `spec` part of a multipart POST /v1/onnx: the files come as parts, named by file."""

    files: dict[Annotated[str, Field(min_length=1, max_length=255)], Digest] = Field(
        default_factory=dict, description="files already uploaded (the rest come as parts)"
    )
