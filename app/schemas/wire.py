"""HTTP request and response models: the kernel request union, blobs, problems, service info.

A kernel request on the wire is its op's own params model (declared in the op's module, the
single source of the parameter names and limits) plus the options every op shares, discriminated
by `op`. The intake turns a validated one into the `KernelRequest` the service carries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from app.checkpoints.reference import CheckpointReference
from app.core.digest import DIGEST_PATTERN, WEIGHT_REF_PATTERN
from app.core.formats import DEFAULT_FORMAT, FormatName, describe_formats
from app.core.names import MAX_LENGTH, PATTERN, Identifier
from app.graphs.spec import GraphInput, GraphNode, GraphParams, Ref
from app.kernels import CATALOG, OpParams
from app.mil import DEFAULT_TARGET, TargetName

Digest = Annotated[
    str,
    Field(
        pattern=DIGEST_PATTERN,
        description="a blob uploaded to /v1/blobs, as `sha256:<hex>` (or bare hex)",
    ),
]
WeightDigest = Annotated[
    str,
    Field(
        pattern=WEIGHT_REF_PATTERN,
        description="a blob uploaded to /v1/blobs, as `sha256:<hex>` (or bare hex); for a "
        "safetensors file of many tensors (a checkpoint), `sha256:<hex>#<tensor name>`",
    ),
]
# A graph's or an ONNX import's `passes` (app/passes), checked by the request.
Passes = Annotated[
    str | list[str] | dict[str, Any] | None,
    Field(
        description='the graph passes the program goes through (docs/passes.md): "default" '
        '(when not given), "none" (the program as written), "fuse-all", one pass by name, a '
        'list of pass names in order, or {"pipeline": ..., "options": {<pass>: {<option>: '
        "value}}}",
        examples=["default", "none", ["const_elimination", "dead_code_elimination"]],
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
    WeightDigest | list[Any] | RawWeight,
    Field(
        description="an inline nested list (row-major, read as float32), a blob digest (or "
        "`sha256:<hex>#<tensor>`: a tensor of an uploaded safetensors checkpoint), "
        "or, in multipart requests, how to read the raw file part of the same name"
    ),
]


class RequestOptions(BaseModel):
    """What every kernel or graph request carries besides what it computes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: FormatName = Field(DEFAULT_FORMAT, description=describe_formats())
    target: TargetName = DEFAULT_TARGET
    name: str | None = Field(
        None, pattern=PATTERN, max_length=MAX_LENGTH, description="model name (default: the op)"
    )
    bypass_cache: bool = Field(False, description="build again even if the artifact is cached")
    verify: bool = Field(
        False,
        description="add verification.json: the program run by the reference executor on seeded "
        "random inputs, compared with the float64 definition of what it computes",
    )
    preflight: Literal["warn", "strict"] = Field(
        "warn",
        description="the ANE preflight's findings go into kernel.json and X-ANE-Preflight; "
        "strict: an error finding refuses the request (422 naming the node)",
    )
    placement: bool = Field(
        False,
        description="with format mlmodelc: add Core ML's placement report (placement.json, which "
        "ops run on the ANE), made on a macOS worker",
    )
    architectures: list[str] | None = Field(
        None,
        min_length=1,
        description="with format aimodel: compile it ahead of time for these chips of the device "
        "table (GET /v1/devices; A17 Pro / M1 and newer, e.g. m4, a18-pro) with `xcrun "
        "coreai-build` on a macOS worker: the zip holds one .aimodelc per chip",
        examples=[["m4", "a18-pro"]],
    )
    max_quantization_error: float | None = Field(
        None,
        gt=0,
        description="refuse the request (422) when quantizing moves an output further than this "
        "from the output with the original weights (max|diff| / max|exact|); implies verify",
    )


QUANTIZE_DESCRIPTION = (
    "compress the op's weight matrix, as coremltools.optimize names its configs: "
    '{"mode": "palettize", "nbits": 1|2|3|4|6|8, "granularity": "per_tensor"|'
    '"per_grouped_channel", "group_size": 32}, {"mode": "linear", "dtype": "int8"|"uint8"|'
    '"int4"|"uint4", "granularity": "per_tensor"|"per_channel"|"per_block", "block_size": 32, '
    '"symmetric": true} or {"mode": "prune", "target_sparsity": 0.5, "dtype": "int8" (optional)}'
)


class KernelOptions(RequestOptions):
    """What every kernel request carries besides its op's parameters."""

    weights: dict[str, WeightValue] = Field(default_factory=dict)
    checkpoint: CheckpointReference | None = Field(
        None,
        description="the op's params and weights from an uploaded Hugging Face checkpoint: its "
        "config's params under the body's, each weight the tensor its role names (a block op: "
        "ffn, attention, decoder_layer, decoder_stack)",
        examples=[
            {"blob": "sha256:<digest of model.safetensors>", "config": {"...": "..."}, "layer": 3}
        ],
    )
    quantize: dict[str, Any] | None = Field(
        None, description=QUANTIZE_DESCRIPTION, examples=[{"mode": "palettize", "nbits": 4}]
    )
    functions: dict[Identifier, dict[str, Any]] | None = Field(
        None,
        description="several functions of the op in one package (ios18), sharing its weights: "
        "function name -> the params it changes; the first is the default",
        examples=[
            {
                "prefill": {"seq_len": 64},
                "decode": {"seq_len": 1, "mode": "decode", "cache_len": 512},
            }
        ],
    )

    if TYPE_CHECKING:
        op: str  # each op's request model adds it, as the Literal of its name (_request_model)


class WireGraphNode(GraphNode):
    weights: dict[str, WeightValue] = Field(
        default_factory=dict,
        description="a catalog op's weights by name, or a primitive's constant tensor arguments",
    )


class GraphRequest(RequestOptions):
    """A graph of catalog ops and MIL primitives, built into ONE program (POST /v1/graphs)."""

    inputs: dict[Identifier, GraphInput] = Field(min_length=1)
    nodes: list[WireGraphNode] = Field(min_length=1)
    outputs: dict[Identifier, Ref] = Field(min_length=1, description="output name -> reference")
    split: bool = Field(
        False,
        description="cut a graph whose weights exceed the program budget into a chain of programs",
    )
    passes: Passes = None

    def graph(self) -> GraphParams:
        """The graph without its weights (they travel by digest), checked for structure."""
        nodes = [n.model_dump(exclude={"weights"}) for n in self.nodes]
        return GraphParams.model_validate(
            {"inputs": self.inputs, "nodes": nodes, "outputs": self.outputs, "split": self.split}
        )


def _request_model(op: str, params: type[OpParams]) -> type[KernelOptions]:
    camel = "".join(part.capitalize() for part in op.split("_"))
    model = create_model(
        f"{camel}KernelRequest",
        __base__=(KernelOptions, params),
        __doc__=params.__doc__,
        # a Literal of a name known at run time: pydantic builds it, no checker can
        op=(Literal[op], Field(description="the catalog op")),  # type: ignore[arg-type]
    )
    # a subclass of its first base; the checker sees only a class made at run time
    return cast("type[KernelOptions]", model)


REQUEST_MODELS: dict[str, type[KernelOptions]] = {
    name: _request_model(name, op.params) for name, op in CATALOG.items()
}

# A union built from the catalog: adding an op to the catalog adds it here.
KERNEL_REQUEST_ADAPTER: TypeAdapter[KernelOptions] = TypeAdapter(
    # a union of the catalog's models, made at run time: to the checker, one KernelOptions
    Annotated[Union[tuple(REQUEST_MODELS.values())], Field(discriminator="op")]  # type: ignore[arg-type]  # noqa: UP007
)


def params_of(req: KernelOptions) -> OpParams:
    """The op's params of a validated wire request, without validating them again."""
    model = CATALOG[req.op].params
    return model.model_construct(**{k: getattr(req, k) for k in model.model_fields})


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document; `field` names the input at fault."""

    model_config = ConfigDict(extra="allow", title="Problem")
    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None
    errors: list[dict[str, str]] | None = None


class BlobInfo(BaseModel):
    digest: str = Field(
        description="sha256 of the tensor's canonical bytes (of the whole file for a "
        "safetensors checkpoint), `sha256:<hex>`"
    )
    dtype: str = Field(description="the tensor's dtype; `safetensors` for a checkpoint file")
    shape: list[int]
    bytes: int
    tensors: int | None = Field(
        None,
        description="a checkpoint file: how many tensors it holds (refer to one as "
        "`sha256:<hex>#<tensor name>`)",
    )


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
    limits: dict[str, int | float] = Field(
        description="the settings that bound requests and jobs (README, Settings; docs/kits.md, "
        "Limits)"
    )


class OpWeight(BaseModel):
    name: str
    shape: str
    required: str


class OpIO(BaseModel):
    name: str
    shape: str


class OpInfo(BaseModel):
    kind: Literal["op"] = "op"
    name: str
    summary: str
    parameters: dict[str, Any] = Field(description="JSON schema of the op's parameters")
    weights: list[OpWeight]
    inputs: list[OpIO]
    outputs: list[OpIO]
    experimental: str | None = None


class PrimitiveArgument(BaseModel):
    in_: Literal["inputs", "params"] = Field(
        alias="in", description="inputs (or weights): a tensor; params: a constant value"
    )
    required: bool
    dtypes: list[str]
    list_: bool = Field(False, alias="list", description="takes a list of references")


class PrimitiveInfo(BaseModel):
    """A MIL primitive a graph node may be (its `op`), with MIL's argument names."""

    kind: Literal["primitive"] = "primitive"
    name: str
    summary: str
    arguments: dict[str, PrimitiveArgument]
    since: str = Field(description="the first target whose opset has it")
    tolerance: float = Field(description="the error bound it adds to a graph's verification")
