"""The kernel request: one frozen value that every edge (HTTP, jobs, CLI, Python, farm workers)
hands to whatever builds it, owning what follows from it: its cache key, its artifact's file name
and which options enter the key.

A request names a catalog op with its validated params, the weights (each identified by digest,
dtype and shape, with its values inline, in a file on this machine, or only in the shared blob
store), the format and target, the model name and whether to verify. Its JSON form is what a job
record stores and what the jobs API shows (weights by digest, inline values left out).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import ValidationError

from app import __version__
from app.digest import canonical, tensor_digest
from app.errors import RequestError
from app.formats import DEFAULT_FORMAT, FORMATS, Format
from app.graphs.spec import GRAPH_OP, GraphParams
from app.kernels import OpParams, get_op, parse_params
from app.kernels.compressed import check_quantize, read_quantize
from app.kernels.functions import check_functions
from app.mil import DEFAULT_TARGET, TARGETS
from app.names import name_problem
from app.quantize import QuantizeConfig, config_json
from app.tensor_files import TensorFile
from app.toolchain import coreai_version, coremltools_version

# Bump when the key's layout changes, so old cache entries are simply never hit again.
KEY_VERSION = 1
PREFLIGHT_MODES = ("warn", "strict")


@dataclass(frozen=True)
class WeightRef:
    """A weight of a request: what identifies it, and where its values are."""

    digest: str  # sha256 of the canonical bytes, `sha256:<hex>`
    dtype: str  # numpy dtype name, e.g. "float32"
    shape: tuple[int, ...]
    inline: np.ndarray | None = None  # values sent with the request
    file: TensorFile | None = None  # a file on this machine holding them (mapped, not read)
    spooled: bool = False  # `file` is a request's spool file, removed when the request ends

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


def request_params(op: str, params: Mapping[str, Any] | OpParams | None) -> OpParams:
    """The validated params of a catalog op, or of a graph (op "graph")."""
    if op != GRAPH_OP:
        return parse_params(get_op(op), params)
    if isinstance(params, GraphParams):
        return params
    try:
        return GraphParams.model_validate(dict(params or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RequestError(field_of(err["loc"]), err["msg"]) from None


def field_of(loc) -> str:
    """A pydantic error location as a field path: ('nodes', 3, 'op') -> 'nodes[3].op'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


@dataclass(frozen=True)
class KernelRequest:
    op: str  # a catalog op, or "graph"
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
    # Several functions of the op in one package sharing its weights: function name -> the params
    # it changes (app/kernels/functions.py); the first is the default.
    functions: Mapping[str, Mapping[str, Any]] | None = None

    @classmethod
    def create(
        cls,
        op: str,
        params: Mapping[str, Any] | OpParams | None = None,
        weights: Mapping[str, np.ndarray] | None = None,
        *,
        format: str = DEFAULT_FORMAT,
        target: str = DEFAULT_TARGET,
        name: str | None = None,
        verify: bool = False,
        bypass_cache: bool = False,
        preflight: str = "warn",
        quantize: Mapping[str, Any] | QuantizeConfig | None = None,
        max_quantization_error: float | None = None,
        placement: bool = False,
        functions: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> KernelRequest:
        """A checked request from Python values (arrays travel inline, so keep them small when
        the request goes to a job queue: large tensors belong in the blob store)."""
        checked = request_params(op, params)
        if format not in FORMATS:
            raise RequestError("format", f"unknown format {format!r}; one of {', '.join(FORMATS)}")
        if target not in TARGETS:
            raise RequestError("target", f"unknown target {target!r}; one of {', '.join(TARGETS)}")
        if name is not None and (problem := name_problem(name)) is not None:
            raise RequestError("name", problem)
        if preflight not in PREFLIGHT_MODES:
            raise RequestError("preflight", f"one of {', '.join(PREFLIGHT_MODES)}")
        refs = {w: WeightRef.of(a) for w, a in (weights or {}).items()}
        config = read_quantization(op, checked, target, quantize, max_quantization_error)
        check_placement(format, placement)
        return cls(op, checked, refs, format, target, name, verify, bypass_cache, preflight,
                   config, max_quantization_error, placement,
                   read_functions(op, functions, target))  # fmt: skip

    # -- what follows from the request -------------------------------------------------------------
    @property
    def is_graph(self) -> bool:
        return self.op == GRAPH_OP

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
    def filename(self) -> str:
        return f"{self.model_name}.{self.artifact_format.extension}"

    @property
    def weight_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights.values())

    @cached_property
    def params_json(self) -> dict[str, Any]:
        return self.params.model_dump(mode="json")

    def key(self, extra: Mapping[str, Any] | None = None) -> str:
        """The artifact's cache key (and the job id): sha256 over the canonical form of
        everything that shapes its bytes. `extra` adds what a backend adds (a compiler's
        toolchain); verification, a strict preflight and quantization enter only when set, so
        keys without them stay as they were (a strict request must not be answered from a
        lenient one's cache)."""
        extra = dict(extra or {})
        if self.verifies:
            extra["verify"] = True
        if self.preflight != "warn":
            extra["preflight"] = self.preflight
        if self.quantize is not None:
            extra["quantize"] = config_json(self.quantize)
        if self.max_quantization_error is not None:
            extra["max_quantization_error"] = self.max_quantization_error
        if self.placement:
            extra["placement"] = True
        if self.functions is not None:
            extra["functions"] = [[n, dict(p)] for n, p in self.functions.items()]  # ordered
        if self.format == "aimodel":  # coreai-core writes those bytes
            extra["coreai"] = coreai_version()
        doc = {
            "v": KEY_VERSION,
            "op": self.op,
            "params": self.params_json,
            "weights": {k: [d, t, list(s)] for k, (d, t, s) in sorted(self._weight_keys())},
            "format": self.format,
            "target": self.target,
            "name": self.model_name,
            "generator": __version__,
            "coremltools": coremltools_version(),
            **extra,
        }
        canonical_doc = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(canonical_doc.encode()).hexdigest()

    def _weight_keys(self):
        return ((name, w.key_part) for name, w in self.weights.items())

    def with_weights(self, weights: Mapping[str, WeightRef]) -> KernelRequest:
        return replace(self, weights=dict(weights))

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights' values (mapped from their files, not read)."""
        return {name: w.array() for name, w in self.weights.items()}

    # -- JSON (job records, the jobs API) ----------------------------------------------------------
    def to_json(self, *, values: bool = True) -> dict[str, Any]:
        """The request as data; `values=False` leaves inline weight values out (for display)."""
        return {
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
            "functions": None if self.functions is None else [[n, dict(p)] for n, p in
                                                              self.functions.items()],
            "weights": {n: w.to_json(values=values) for n, w in self.weights.items()},
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelRequest:
        weights = {n: WeightRef.from_json(n, w) for n, w in data.get("weights", {}).items()}
        params = request_params(data["op"], data.get("params"))
        target, limit = data.get("target", DEFAULT_TARGET), data.get("max_quantization_error")
        return cls(
            data["op"],
            params,
            weights,
            data.get("format", DEFAULT_FORMAT),
            target,
            data.get("name"),
            bool(data.get("verify", False)),
            bool(data.get("bypass_cache", False)),
            data.get("preflight", "warn"),
            read_quantization(data["op"], params, target, data.get("quantize"), limit),
            limit,
            bool(data.get("placement", False)),
            read_functions(
                data["op"], dict(data["functions"]) if data.get("functions") else None, target
            ),
        )


def read_quantization(
    op: str,
    params: OpParams,
    target: str,
    quantize: Mapping[str, Any] | QuantizeConfig | None,
    limit: float | None,
) -> QuantizeConfig | None:
    """The request's quantize config, checked against the op's weight shapes and the target
    (before any weight is read), and its error limit, which needs something quantized: by the
    request (a kernel) or by one of its nodes (a graph, quantized per node)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float)
                              or not limit > 0):  # fmt: skip
        raise RequestError("max_quantization_error", f"must be a positive number, not {limit!r}")
    if op == GRAPH_OP:
        if quantize is not None:
            raise RequestError("quantize", "a graph is quantized node by node: nodes[i].quantize")
        quantized = any(n.quantize is not None for n in params.nodes)  # type: ignore[attr-defined]
    else:
        quantized = quantize is not None
    if limit is not None and not quantized:
        raise RequestError("max_quantization_error", "nothing is quantized: add a quantize option")
    if quantize is None:
        return None
    config = read_quantize(quantize, "quantize")
    check_quantize(op, get_op(op).weights(params), config, target)
    return config


def check_placement(format: str, placement: bool) -> None:
    """Core ML's placement report is made of a compiled model: it needs format mlmodelc."""
    if placement and not FORMATS[format].compiled:
        compiled = ", ".join(name for name, f in FORMATS.items() if f.compiled)
        raise RequestError("placement", f"a placement report needs format {compiled}")


def read_functions(
    op: str, functions: Mapping[str, Mapping[str, Any]] | None, target: str
) -> dict[str, dict[str, Any]] | None:
    """The `functions` option, checked for shape (each function's params are checked when it
    is built, their faults named `functions.<name>.<key>`)."""
    if functions is None:
        return None
    if op == GRAPH_OP:
        raise RequestError("functions", "functions package several calls of one catalog op")
    check_functions(functions, target)
    return {name: dict(params) for name, params in functions.items()}
