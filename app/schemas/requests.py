"""HTTP request and response models: the kernel request union, blobs, problems, service info.

A kernel request is the op's own params model (app/schemas/params.py, the single source of the
parameter names and limits) plus the options every op shares, discriminated by `op`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from app.schemas.params import PARAMS, OpParams

DIGEST_PATTERN = r"^(sha256:)?[0-9a-f]{64}$"
Digest = Annotated[
    str,
    Field(
        pattern=DIGEST_PATTERN,
        description="a blob uploaded to /v1/blobs, as `sha256:<hex>` (or bare hex)",
    ),
]
NUMPY_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "uint8", "uint16")
RawDType = Literal["float16", "float32", "float64", "int8", "int16", "int32", "uint8", "uint16"]


class RawWeight(BaseModel):
    """Describes a multipart file part holding raw little-endian bytes (no .npy header)."""

    model_config = ConfigDict(extra="forbid")
    dtype: RawDType | None = Field(None, description="default: the dtype the op stores it in")
    shape: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, max_length=8, description="default: the shape the op expects"
    )


WeightValue = Annotated[
    Digest | list[Any] | RawWeight,
    Field(
        description="an inline nested list (row-major, read as float32), a blob digest, "
        "or, in multipart requests, how to read the raw file part of the same name"
    ),
]


class KernelOptions(BaseModel):
    """What every kernel request carries besides its op's parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["mlpackage", "mil", "mlmodelc"] = Field(
        "mlpackage",
        description="mlpackage: zipped .mlpackage; mil: model.mil + weights/weight.bin; "
        "mlmodelc: compiled (needs a compiler worker)",
    )
    target: Literal["ios18", "ios17"] = "ios18"
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        max_length=64,
        description="model name (default: the op)",
    )
    weights: dict[str, WeightValue] = Field(default_factory=dict)
    bypass_cache: bool = Field(False, description="build again even if the artifact is cached")
    verify: bool = Field(
        False,
        description="add verification.json: the kernel run by the reference executor on seeded "
        "random inputs, compared with its op's float64 definition",
    )


def _request_model(op: str, params: type[OpParams]) -> type[BaseModel]:
    camel = "".join(part.capitalize() for part in op.split("_"))
    model = create_model(
        f"{camel}KernelRequest",
        __base__=(KernelOptions, params),
        __doc__=params.__doc__,
        op=(Literal[op], Field(description="the catalog op")),  # type: ignore[valid-type]
    )
    return model


REQUEST_MODELS: dict[str, type[BaseModel]] = {
    op: _request_model(op, params) for op, params in PARAMS.items()
}
OPTION_FIELDS = frozenset(KernelOptions.model_fields) | {"op"}

# A union built from the catalog: adding an op to PARAMS adds it here.
KernelRequest = Annotated[Union[tuple(REQUEST_MODELS.values())], Field(discriminator="op")]  # noqa: UP007
KERNEL_REQUEST_ADAPTER: TypeAdapter[Any] = TypeAdapter(KernelRequest)


def split_request(req: BaseModel) -> tuple[str, dict[str, Any], KernelOptions]:
    """(op, params, options) of a validated request."""
    # Only the params are dumped: dumping the weights would copy every inline number.
    params = req.model_dump(mode="json", exclude=set(OPTION_FIELDS))
    op = req.op  # type: ignore[attr-defined]
    options = KernelOptions.model_construct(
        **{k: getattr(req, k) for k in KernelOptions.model_fields}
    )
    return op, params, options


class Problem(BaseModel):
    """An RFC 9457 problem document; `field` names the input at fault."""

    model_config = ConfigDict(extra="allow")
    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None
    errors: list[dict[str, str]] | None = None


class BlobInfo(BaseModel):
    digest: str = Field(description="sha256 of the tensor's canonical bytes, `sha256:<hex>`")
    dtype: str
    shape: list[int]
    bytes: int


class Versions(BaseModel):
    service: str
    generator: str
    coremltools: str
    python: str


class Info(BaseModel):
    versions: Versions
    formats: list[str] = Field(description="formats this instance can produce now")
    compiler: dict[str, Any] = Field(description="whether a .mlmodelc compiler is configured")
    targets: list[str]
    ops: list[str]
    limits: dict[str, int]


class OpWeight(BaseModel):
    name: str
    shape: str
    required: str


class OpIO(BaseModel):
    name: str
    shape: str


class OpInfo(BaseModel):
    name: str
    summary: str
    parameters: dict[str, Any] = Field(description="JSON schema of the op's parameters")
    weights: list[OpWeight]
    inputs: list[OpIO]
    outputs: list[OpIO]
    experimental: str | None = None
