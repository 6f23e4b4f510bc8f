"""The kernel request: one frozen value that every edge (HTTP, jobs, CLI, Python, farm workers)
hands to whatever builds it, owning what follows from it: its cache key (computed once), its
artifact's file name and which options enter the key.

A request is of one of three kinds (`RequestKind`): one catalog op, several functions of one op
in one package, or a graph of ops and primitives in one program. `KernelRequest.create` is the
one way to make one: every edge calls it, and it refuses a mix of kinds (a graph with
`functions`, say) naming the field. A request holds the validated params, the weights (each
identified by digest, dtype and shape, with its values inline, in a file on this machine, or only
in the shared blob store), the format and target, the model name, whether to verify and, for a
graph or an ONNX import, its graph passes (app/passes). Its JSON form is what a job record stores and what the
jobs API shows (weights by digest, inline values left out).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from app import __version__
from app.catalog_build import build_functions, build_kernel
from app.core.digest import canonical, file_digest, tensor_digest
from app.core.formats import DEFAULT_FORMAT, FORMATS, Format, artifact_filename
from app.core.names import name_problem
from app.core.toolchain import coreai_version, coremltools_version, onnx_importer
from app.devices import COREAI_ARCHITECTURES
from app.errors import RequestError
from app.graphs.build import build_graph
from app.graphs.built import GraphBuild
from app.graphs.spec import GRAPH_OP, GraphParams
from app.graphs.split import Chain, split, split_stream
from app.kernels import KernelBuild, OpParams, ProgramBuild, WeightSpec, get_op, parse_params
from app.kernels.compressed import check_quantize, read_quantize
from app.kernels.functions import check_functions
from app.mil import DEFAULT_TARGET, TARGETS
from app.mil.ceilings import Ceilings
from app.onnx.params import ONNX_OP, OnnxParams, file_problem, require_onnx
from app.passes import (
    DEFAULT_CHOICE,
    NO_PASSES,
    PassChoice,
    Pipeline,
    hand_written,
    parse_passes,
    resolve,
)
from app.passes import VERSION as HAND_WRITTEN_VERSION
from app.quantize import QuantizeConfig, config_json
from app.settings import PROGRAM_WEIGHT_BUDGET_SETTING
from app.tensors.headers import TensorFile

# Bump when the key's layout changes, so old cache entries are simply never hit again.
KEY_VERSION = 1
PREFLIGHT_MODES = ("warn", "strict")


@dataclass(frozen=True)
class WeightRef:
    """A weight of a request: what identifies it, and where its values are. A file on this
    machine may be hashed only when its digest is first asked for (`of_file(path, lazy=True)`):
    a local build asks nothing of it (no cache, no job record), and hashing is a pass over the
    whole file, a model of hundreds of megabytes."""

    given_digest: str | None  # sha256 of the canonical bytes, `sha256:<hex>`; None: not yet
    dtype: str  # numpy dtype name, e.g. "float32"
    shape: tuple[int, ...]
    inline: np.ndarray | None = None  # values sent with the request
    file: TensorFile | None = None  # a file on this machine holding them (mapped, not read)
    spooled: bool = False  # `file` is a request's spool file, removed when the request ends

    @classmethod
    def of_file(cls, path: Path, digest: str | None = None, *, lazy: bool = False) -> WeightRef:
        """A file on this machine as a request's weight (an ONNX model's files): its bytes as
        one uint8 axis, mapped, never read here. `lazy`: hashed when the digest is asked for."""
        size = path.stat().st_size
        if digest is None and not lazy:
            digest = file_digest(path)
        tensor = TensorFile(path, 0, np.dtype("u1"), (size,), "raw", digest or "")
        return cls(digest, "uint8", (size,), file=tensor)

    @cached_property
    def digest(self) -> str:
        if self.given_digest is not None:
            return self.given_digest
        if self.file is None:
            raise ValueError("a weight with neither a digest nor a file")
        return file_digest(self.file.path, self.file.offset, self.file.nbytes)

    @classmethod
    def of(cls, array: np.ndarray) -> WeightRef:
        array = canonical(np.asarray(array))
        return cls(tensor_digest(array), array.dtype.name, tuple(array.shape), inline=array)

    @property
    def key_part(self) -> tuple[str, str, tuple[int, ...]]:
        """The same bytes read as another dtype or shape are another tensor."""
        return self.digest, self.dtype, self.shape

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def located(self) -> bool:
        """Whether the values are at hand here (else only the blob store has them)."""
        return self.inline is not None or self.file is not None

    def array(self) -> np.ndarray:
        if self.inline is not None:
            return self.inline
        if self.file is None:
            raise ValueError(f"weight {self.digest} is not resolved to its values")
        return self.file.array()

    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "digest": self.digest,
            "dtype": self.dtype,
            "shape": list(self.shape),
        }
        if values and self.inline is not None:
            data["inline"] = self.inline.tolist()
        return data

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> WeightRef:
        shape = tuple(int(d) for d in data["shape"])
        inline = data.get("inline")
        if inline is None:
            return cls(data["digest"], data["dtype"], shape)
        array = np.asarray(inline, dtype=data["dtype"]).reshape(shape)
        if tensor_digest(array) != data["digest"]:
            raise RequestError(f"weights.{name}", "inline values do not match their digest")
        return cls(data["digest"], array.dtype.name, shape, inline=array)


class RequestKind(StrEnum):
    """What a request builds; each kind reads its own part of the request."""

    OP = "op"  # one catalog op: `op`, its `params`, maybe `quantize`
    FUNCTIONS = "functions"  # several calls of one catalog op in one package: `functions` too
    GRAPH = "graph"  # a graph of ops and primitives in one program: `params` is a GraphParams
    ONNX = "onnx"  # an ONNX model imported into one program: `params` is an OnnxParams, the
    # weights are the model's files (each a byte tensor, by the name it is uploaded under)


@dataclass(frozen=True)
class KernelRequest:
    """One request of one kind; made by `create` (or `from_json`, which calls it)."""

    kind: RequestKind
    # The catalog op; a graph's is "graph", its name wherever a request is named by one word
    # (cache keys, job records, metrics, the default model name).
    op: str
    params: OpParams  # validated, defaults filled in (GraphParams for a graph)
    weights: Mapping[str, WeightRef] = field(default_factory=dict)
    format: str = DEFAULT_FORMAT
    target: str = DEFAULT_TARGET
    name: str | None = None  # the model name; None: the op's name
    verify: bool = False  # add verification.json (app/reference)
    bypass_cache: bool = False  # build again even if cached (not part of the identity)
    preflight: str = "warn"  # "strict": an ANE preflight error refuses the request
    quantize: QuantizeConfig | None = None  # compress the op's weight matrices (app/quantize)
    # Fail the request when quantizing moves an output further than this from the one computed
    # with the original weights (max|diff| / max|exact|); setting it verifies the kernel.
    max_quantization_error: float | None = None
    # An .mlmodelc with Core ML's placement report (placement.json): compiled on a macOS worker.
    placement: bool = False
    # Kind FUNCTIONS: function name -> the params it changes (app/kernels/functions.py); the
    # first is the default.
    functions: Mapping[str, Mapping[str, Any]] | None = None
    # Format aimodel compiled ahead of time for these chips of the device table (one .aimodelc
    # each, by `xcrun coreai-build` on a macOS worker); None: the .aimodel alone.
    architectures: tuple[str, ...] | None = None
    # Kinds GRAPH and ONNX: the graph passes its program goes through (app/passes; "default" unless the
    # request says otherwise). None for the other kinds: a catalog kernel is built as written.
    passes: PassChoice | None = None

    @classmethod
    def create(
        cls,
        op: str | None = None,
        params: Mapping[str, Any] | OpParams | None = None,
        weights: Mapping[str, np.ndarray | WeightRef] | None = None,
        *,
        graph: Mapping[str, Any] | GraphParams | None = None,
        onnx: Mapping[str, Any] | OnnxParams | None = None,
        functions: Mapping[str, Mapping[str, Any]] | None = None,
        quantize: Mapping[str, Any] | QuantizeConfig | None = None,
        format: str = DEFAULT_FORMAT,
        target: str = DEFAULT_TARGET,
        name: str | None = None,
        verify: bool = False,
        bypass_cache: bool = False,
        preflight: str = "warn",
        max_quantization_error: float | None = None,
        placement: bool = False,
        architectures: Sequence[str] | None = None,
        passes: Any = None,
    ) -> KernelRequest:
        """The one checked constructor. `op` (with `params`, and `functions` for a package of
        several) or `graph` says what is built; every option is checked before any weight is
        read, each fault naming its field. Weights are arrays (they travel inline, so keep
        them small when the request goes to a job queue: large tensors belong in the blob
        store) or `WeightRef`s an edge resolved already; an edge that resolves them after
        the checks attaches them with `with_weights`."""
        kind = _kind(op, params, graph, functions, quantize, onnx)
        checked: OpParams
        if kind is RequestKind.GRAPH:
            assert graph is not None
            op, checked = GRAPH_OP, _graph_params(graph)
        elif kind is RequestKind.ONNX:
            op, checked = ONNX_OP, _onnx_params(onnx, weights)
        else:
            assert op is not None
            checked = parse_params(get_op(op), params)
        if format not in FORMATS:
            raise RequestError("format", f"unknown format {format!r}; one of {', '.join(FORMATS)}")
        if target not in TARGETS:
            raise RequestError("target", f"unknown target {target!r}; one of {', '.join(TARGETS)}")
        if name is not None and (problem := name_problem(name)) is not None:
            raise RequestError("name", problem)
        if preflight not in PREFLIGHT_MODES:
            raise RequestError("preflight", f"one of {', '.join(PREFLIGHT_MODES)}")
        config = _quantization(op, kind, checked, target, quantize, max_quantization_error)
        choice = _passes(kind, passes)
        _check_placement(format, placement)
        chips = None if architectures is None else _device_compile(format, architectures)
        if functions is not None:
            check_functions(functions, target)
            functions = {fn: dict(fn_params) for fn, fn_params in functions.items()}
        refs = {
            w: a if isinstance(a, WeightRef) else WeightRef.of(a)
            for w, a in (weights or {}).items()
        }
        return cls(
            kind,
            op,
            checked,
            refs,
            format,
            target,
            name,
            verify,
            bypass_cache,
            preflight,
            config,
            max_quantization_error,
            placement,
            functions,
            chips,
            choice,
        )

    # -- what follows from the request -------------------------------------------------------------
    @property
    def verifies(self) -> bool:
        """Whether the build is verified: asked for, or needed to hold the quantization error."""
        return self.verify or self.max_quantization_error is not None

    @property
    def model_name(self) -> str:
        return self.name or self.op

    @property
    def artifact_format(self) -> Format:
        return FORMATS[self.format]

    @property
    def compiled(self) -> bool:
        """Whether a compiler makes the artifact (so a job does): a compiled format, or an
        .aimodel compiled for device architectures."""
        return self.artifact_format.compiled or self.architectures is not None

    @property
    def needs_macos(self) -> bool:
        """Only Core ML's placement report and Core AI's device compile need a Mac."""
        return self.placement or self.architectures is not None

    @property
    def filename(self) -> str:
        return artifact_filename(self.model_name, self.format, self.architectures is not None)

    @property
    def weight_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights.values())

    @cached_property
    def weight_specs(self) -> tuple[WeightSpec, ...]:
        """The weights a catalog op's request takes (a graph's are named by its nodes)."""
        if self.kind in (RequestKind.GRAPH, RequestKind.ONNX):
            raise ValueError("a graph's weights are its nodes', an ONNX import's its files")
        return tuple(get_op(self.op).weights(self.params))

    @cached_property
    def pipeline(self) -> Pipeline | None:
        """The graph passes the program goes through; None when none run. For a format loaded by
        ANE-direct runtimes the default pipeline leaves out the passes that would write an op
        the preflight reports failing there (gelu, layer_norm); "fuse-all" does not."""
        if self.passes is None or self.passes.runs_nothing:
            return None
        return resolve(self.passes, ane_direct=self.artifact_format.ane_direct)

    @cached_property
    def params_json(self) -> dict[str, Any]:
        return self.params.model_dump(mode="json")

    @cached_property
    def key(self) -> str:
        """The artifact's cache key (and the job id): sha256 over the canonical form of
        everything that shapes its bytes; computed once per request."""
        return _digest(self._key_doc)

    def compiled_key(self, toolchain: Mapping[str, Any]) -> str:
        """The key of the request compiled by `toolchain` (a new compiler compiles afresh)."""
        return _digest({**self._key_doc, "toolchain": dict(toolchain)})

    @cached_property
    def _key_doc(self) -> dict[str, Any]:
        """What the key hashes. Verification, a strict preflight, quantization, placement,
        functions, architectures and a graph's or an import's passes (unless "none") enter only when set, so
        keys without them stay as they were (a strict request must not be answered from a
        lenient one's cache)."""
        doc: dict[str, Any] = {
            "v": KEY_VERSION,
            "op": self.op,
            "params": self.params_json,
            "weights": {k: [d, t, list(s)] for k, (d, t, s) in sorted(self._weight_keys())},
            "format": self.format,
            "target": self.target,
            "name": self.model_name,
            "generator": __version__,
            "coremltools": coremltools_version(),
        }
        if self.verifies:
            doc["verify"] = True
        if self.preflight != "warn":
            doc["preflight"] = self.preflight
        if self.quantize is not None:
            doc["quantize"] = config_json(self.quantize)
        if self.max_quantization_error is not None:
            doc["max_quantization_error"] = self.max_quantization_error
        if self.placement:
            doc["placement"] = True
        if self.functions is not None:
            doc["functions"] = self._functions_json  # ordered: the first is the default
        if self.architectures is not None:
            doc["architectures"] = list(self.architectures)
        if self.format == "aimodel":  # coreai-core writes those bytes
            doc["coreai"] = coreai_version()
        if self.kind is RequestKind.ONNX:
            doc["onnx"] = onnx_importer()
        if self.pipeline is not None:  # "none" keeps the key a request had before passes
            doc["passes"] = self.pipeline.key_json()
        elif self.kind in (RequestKind.OP, RequestKind.FUNCTIONS):
            # written by hand, through the hand-written pipeline (`build`), whose result can
            # follow from the weights (a gain of ones, two equal weights): its version is part
            # of what shapes the bytes
            doc["passes"] = {"hand_written": HAND_WRITTEN_VERSION}
        return doc

    @property
    def _functions_json(self) -> list[list[Any]] | None:
        if self.functions is None:
            return None
        return [[fn, dict(fn_params)] for fn, fn_params in self.functions.items()]

    def _weight_keys(self):
        return ((name, w.key_part) for name, w in self.weights.items())

    @property
    def known_digests(self) -> dict[str, str]:
        """The weights' digests packaging can reuse: those whose bytes it keeps as given
        (float16, float32); other dtypes are converted, and the converted tensor is hashed."""
        return {n: w.digest for n, w in self.weights.items() if w.dtype in ("float16", "float32")}

    # -- what the builder asks of it (app/artifacts.py) --------------------------------------------
    def build(
        self,
        random_seed: int | None = None,
        ceilings: Ceilings = Ceilings(),
        weight_budget: int | None = None,
    ) -> ProgramBuild:
        """The request's program: a catalog kernel's, a package of functions', a graph's or an
        ONNX model's, missing weights drawn from `random_seed` when given; held to `ceilings` (a
        package of functions to the defaults: its parts are catalog kernels of bounded params).
        An ONNX model whose weights exceed `weight_budget` is refused before they are read.
        A graph's and an import's program then go through the request's graph passes, a
        catalog kernel's through the default pipeline for programs written by hand (app/passes
        `hand_written`): the one place a request's program meets them (a split graph's parts,
        app/graphs/split.py, go through the same pipeline)."""
        built = self._as_built(random_seed, ceilings, weight_budget)
        if self.kind in (RequestKind.OP, RequestKind.FUNCTIONS):
            # written by hand: the default pipeline runs, and leaves it as it is (its key and
            # bytes with it) unless a pass finds something to change
            return built.as_written_through(
                hand_written(ane_direct=self.artifact_format.ane_direct)
            )
        return built.through(self.pipeline)

    def _as_built(
        self, random_seed: int | None, ceilings: Ceilings, weight_budget: int | None
    ) -> ProgramBuild:
        match self.kind:
            case RequestKind.ONNX:
                # onnx and onnxruntime are an extra: imported by those who import a model
                from app.onnx.importer import onnx_program
                from app.onnx.reader import ReadLimits

                assert isinstance(self.params, OnnxParams)
                paths = {}
                for file, ref in self.weights.items():
                    if ref.file is None:
                        raise RequestError(
                            f"files.{file}", "an ONNX import reads its files from disk"
                        )
                    paths[file] = ref.file.path
                return onnx_program(
                    self.params,
                    paths,
                    target=self.target,
                    name=self.name or ONNX_OP,
                    ceilings=ceilings,
                    limits=ReadLimits(max_weight_bytes=weight_budget),
                    quantize=self.quantize,
                )
            case RequestKind.GRAPH:
                assert isinstance(self.params, GraphParams)
                return build_graph(
                    self.params,
                    self.arrays(),
                    ceilings=ceilings,
                    target=self.target,
                    name=self.name,
                    random_seed=random_seed,
                )
            case RequestKind.FUNCTIONS:
                assert self.functions is not None
                return build_functions(
                    self.op,
                    self.params_json,
                    self.functions,
                    self.arrays(),
                    quantize=self.quantize,
                    target=self.target,
                    name=self.name,
                    random_seed=random_seed,
                )
            case RequestKind.OP:
                return build_kernel(
                    self.op,
                    self.params,
                    self.arrays(),
                    quantize=self.quantize,
                    ceilings=ceilings,
                    target=self.target,
                    name=self.name,
                    random_seed=random_seed,
                )

    def splits_within(self, weight_bytes: int, budget: int) -> bool:
        """Whether the build, of `weight_bytes`, is cut into a chain of programs within `budget`:
        when over it and asked to (`split`). A graph over it that does not ask is refused (one
        program of it would not load); a package of functions is one program, never cut."""
        asked = bool(getattr(self.params, "split", False))
        if weight_bytes <= budget:
            return False
        if self.kind is RequestKind.GRAPH and not asked:
            raise RequestError(
                "split",
                f"the graph's weights take {weight_bytes} bytes, over the budget of {budget} "
                f"bytes per program ({PROGRAM_WEIGHT_BUDGET_SETTING}); ask for split: true to "
                "get a chain of programs within it",
                title="Program too large",
                limit=budget,
            )
        if self.kind is RequestKind.FUNCTIONS and asked:
            raise RequestError("functions", "a package of functions is one program: no split")
        return asked

    def split(self, build: ProgramBuild, budget: int) -> Chain:
        """The build as a chain of programs within `budget`: a graph cut at node boundaries, a
        catalog op by its own parts (`CatalogOp.parts`)."""
        if self.kind is RequestKind.GRAPH:
            assert isinstance(build, GraphBuild)
            return split(build, budget, build.weights, self.target, build.name)
        assert isinstance(build, KernelBuild)
        return split_stream(build, budget, self.target, build.name, self.quantize)

    def with_weights(self, weights: Mapping[str, WeightRef]) -> KernelRequest:
        return replace(self, weights=dict(weights))

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights' values (mapped from their files, not read)."""
        return {name: w.array() for name, w in self.weights.items()}

    # -- JSON (job records, the jobs API) ----------------------------------------------------------
    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        """The request as data; `values=False` leaves inline weight values out (for display)."""
        return {
            "kind": self.kind.value,
            "op": self.op,
            "params": self.params_json,
            "format": self.format,
            "target": self.target,
            "name": self.name,
            "bypass_cache": self.bypass_cache,
            "verify": self.verify,
            "preflight": self.preflight,
            "quantize": None if self.quantize is None else config_json(self.quantize),
            "max_quantization_error": self.max_quantization_error,
            "placement": self.placement,
            "functions": self._functions_json,
            "architectures": None if self.architectures is None else list(self.architectures),
            "passes": None if self.passes is None else self.passes.to_json(),
            "weights": {n: w.to_json(values=values) for n, w in self.weights.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelRequest:
        # Records written before the kind was spelled out name a graph by its op alone.
        kind = data.get("kind", data["op"])
        graph, onnx = kind == RequestKind.GRAPH, kind == RequestKind.ONNX
        functions = data.get("functions")
        return cls.create(
            None if graph or onnx else data["op"],
            None if graph or onnx else data.get("params"),
            {n: WeightRef.from_json(n, w) for n, w in data.get("weights", {}).items()},
            graph=data.get("params") if graph else None,
            onnx=data.get("params") if onnx else None,
            functions=dict(functions) if functions else None,
            quantize=data.get("quantize"),
            format=data.get("format", DEFAULT_FORMAT),
            target=data.get("target", DEFAULT_TARGET),
            name=data.get("name"),
            verify=bool(data.get("verify", False)),
            bypass_cache=bool(data.get("bypass_cache", False)),
            preflight=data.get("preflight", "warn"),
            max_quantization_error=data.get("max_quantization_error"),
            placement=bool(data.get("placement", False)),
            architectures=data.get("architectures"),
            # a graph or an import recorded before passes existed was built as written
            passes=data.get("passes", NO_PASSES.to_json()) if graph or onnx else None,
        )


def _digest(doc: Mapping[str, Any]) -> str:
    canonical_doc = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical_doc.encode()).hexdigest()


def _kind(op, params, graph, functions, quantize, onnx=None) -> RequestKind:
    """The kind the arguments ask for; a mix of two kinds is refused, naming the field that
    does not belong."""
    if onnx is not None:
        for wrong, value in (
            ("op", op),
            ("params", params),
            ("graph", graph),
            ("functions", functions),
        ):
            if value is not None:
                raise RequestError(wrong, "an ONNX import is its model's files and options alone")
        return RequestKind.ONNX
    if graph is None:
        if op is None:
            raise RequestError("op", "a request names a catalog op, or is a graph")
        if op == GRAPH_OP:
            raise RequestError(
                "op", "a graph is given as a graph (inputs, nodes, outputs), not as an op"
            )
        return RequestKind.OP if functions is None else RequestKind.FUNCTIONS
    for wrong, value, why in (
        ("op", op, "a request is one catalog op or one graph, not both"),
        ("params", params, "a graph's params are its nodes'"),
        ("functions", functions, "functions package several calls of one catalog op"),
        ("quantize", quantize, "a graph is quantized node by node: nodes[i].quantize"),
    ):
        if value is not None:
            raise RequestError(wrong, why)
    return RequestKind.GRAPH


def _graph_params(graph: Mapping[str, Any] | GraphParams) -> GraphParams:
    if isinstance(graph, GraphParams):
        return graph
    try:
        return GraphParams.model_validate(dict(graph))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RequestError(field_of(err["loc"]), err["msg"]) from None


def _onnx_params(
    onnx: Mapping[str, Any] | OnnxParams | None, weights: Mapping[str, Any] | None
) -> OnnxParams:
    """The import's options, and its files: each a byte tensor (a file's bytes) under a
    relative name, the model among them."""
    require_onnx()
    try:
        params = (
            onnx if isinstance(onnx, OnnxParams) else OnnxParams.model_validate(dict(onnx or {}))
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RequestError(field_of(err["loc"]), err["msg"]) from None
    files = dict(weights or {})
    for name, ref in files.items():
        if (problem := file_problem(name)) is not None:
            raise RequestError(f"files.{name}", problem)
        dtype = ref.dtype if isinstance(ref, WeightRef) else np.asarray(ref).dtype.name
        shape = ref.shape if isinstance(ref, WeightRef) else np.shape(ref)
        if dtype != "uint8" or len(shape) != 1:
            raise RequestError(f"files.{name}", "a file is given as its bytes (uint8, one axis)")
    if files and params.model not in files:
        raise RequestError(
            "model", f"{params.model!r} is not among the files ({', '.join(sorted(files))})"
        )
    return params


def field_of(loc) -> str:
    """A pydantic error location as a field path: ('nodes', 3, 'op') -> 'nodes[3].op'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _quantization(
    op: str,
    kind: RequestKind,
    params: OpParams,
    target: str,
    quantize: Mapping[str, Any] | QuantizeConfig | None,
    limit: float | None,
) -> QuantizeConfig | None:
    """The request's quantize config, checked against the op's weight shapes and the target
    (before any weight is read), and its error limit, which needs something quantized: by the
    request (a kernel) or by one of its nodes (a graph, quantized per node)."""
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0
    ):
        raise RequestError("max_quantization_error", f"must be a positive number, not {limit!r}")
    if kind is RequestKind.GRAPH:
        assert isinstance(params, GraphParams)
        quantized = any(n.quantize is not None for n in params.nodes)
    else:
        quantized = quantize is not None
    if limit is not None and not quantized:
        raise RequestError("max_quantization_error", "nothing is quantized: add a quantize option")
    if quantize is None:
        return None
    config = read_quantize(quantize, "quantize")
    if kind is RequestKind.ONNX:  # the model's weights are checked as the import reads them
        return config
    check_quantize(op, get_op(op).weights(params), config, target)
    return config


def _passes(kind: RequestKind, passes: Any) -> PassChoice | None:
    """A graph's or an ONNX import's passes ("default" when not given); a catalog kernel takes
    none (its program is written by hand)."""
    if kind not in (RequestKind.GRAPH, RequestKind.ONNX):
        if passes is not None:
            raise RequestError("passes", "graph passes run on graph and ONNX requests")
        return None
    return DEFAULT_CHOICE if passes is None else parse_passes(passes)


def _check_placement(format: str, placement: bool) -> None:
    """Core ML's placement report is made of a compiled model: it needs format mlmodelc."""
    if placement and not FORMATS[format].compiled:
        compiled = ", ".join(name for name, f in FORMATS.items() if f.compiled)
        raise RequestError("placement", f"a placement report needs format {compiled}")


def _device_compile(format: str, architectures: Sequence[str]) -> tuple[str, ...]:
    if format != "aimodel":
        raise RequestError("architectures", 'a device compile starts from format "aimodel"')
    return check_architectures(architectures)


def check_architectures(names: Sequence[str]) -> tuple[str, ...]:
    """The chips a device compile is for: each a chip of the device table that Core AI
    compiles ahead of time for (a 422 naming the one that is not, and the known ones), each
    named once."""
    known = ", ".join(COREAI_ARCHITECTURES)
    if isinstance(names, str) or not names:
        raise RequestError("architectures", f"a list naming at least one of {known}")
    for i, name in enumerate(names):
        if name not in COREAI_ARCHITECTURES:
            raise RequestError(
                f"architectures[{i}]",
                f"{name!r} is not a chip Core AI compiles ahead of time for; known: {known}",
            )
    if len(set(names)) != len(names):
        raise RequestError("architectures", "an architecture is named twice")
    return tuple(names)
