"""The artifact builder: a kernel request -> its zip, the one way every path makes one.

    build -> size limit -> verify -> package -> digest -> publish (or save, or return)

`prepare` builds the program and checks it (the weight budget, the reference verification);
`write` packages it into a zip stream; `publish` writes that zip into a content store and puts
it in place under the request's key (safe in a build worker process: the caller indexes it);
`save` writes it to a path atomically; `zip_bytes` returns it. HTTP builds, jobs, the CLI and the
Python API all go through here; compiled (.mlmodelc) artifacts start from `prepare` too.
"""

from __future__ import annotations

import io
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from app.cache.faults import ARTIFACT_STORE, storage_fault
from app.cache.hot import SMALL_ARTIFACT_BYTES
from app.cache.store import Published, StoreLocation, publish_files
from app.catalog_build import build_functions, build_kernel
from app.coreai.package import aimodel_of, write_aimodel_zip
from app.errors import ErrorKind, FieldError, RequestError
from app.estimates import build_works, works_to_json
from app.files import atomic_file, discard, in_flight
from app.graphs.build import build_graph
from app.graphs.split import Chain, split, split_stream
from app.kernels import KernelBuild
from app.language.targets import DEFAULT_TARGET
from app.mil.ceilings import Ceilings
from app.packaging import Entry, write_chain_zip, write_kernel_zip
from app.packaging.digesting import DigestingWriter
from app.preflight import (
    Finding,
    PreflightOptions,
    findings_to_json,
    first_error,
    preflight,
    quantization_findings,
    summary_header,
)
from app.reference.apple import with_apple_runtime
from app.reference.verify import report_entry, verify_build, verify_functions
from app.request import KernelRequest, RequestKind
from app.settings import DEFAULT_PROGRAM_WEIGHT_BUDGET, PROGRAM_WEIGHT_BUDGET_SETTING, Settings

# Zips of weights up to this size are built in memory by `zip_bytes`; larger ones go through a
# temporary file, because a growing in-memory buffer would briefly hold a big zip twice.
_IN_MEMORY_BYTES = 16 << 20
_ZIP_MARGIN = 64 << 10


@dataclass(frozen=True)
class Limits:
    """What one build may hold: weight bytes per artifact (over it: 413) and per program (a
    graph over it is refused unless it asks to be split; any program over it gets a preflight
    warning)."""

    max_artifact_bytes: int | None = None
    max_program_weight_bytes: int = DEFAULT_PROGRAM_WEIGHT_BUDGET
    ceilings: Ceilings = field(default_factory=Ceilings)  # per tensor and program, as made

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        ceilings = Ceilings(
            settings.max_tensor_elements,
            settings.max_tensor_bytes,
            settings.max_program_elements,
            settings.max_program_bytes,
        )
        return cls(settings.max_artifact_bytes, settings.max_program_weight_bytes, ceilings)


@dataclass(frozen=True)
class Prepared:
    """A request built and checked, with what goes into its zip beside the program."""

    request: KernelRequest
    build: KernelBuild
    findings: tuple[Finding, ...] = ()  # the ANE preflight's, in program order
    verification: dict[str, Any] | None = None  # the reference report, when asked for
    chain: Chain | None = None  # a graph split into programs within the budget
    aimodel: dict[str, bytes] | None = None  # format aimodel: the asset's files (app.coreai)

    @property
    def preflight_summary(self) -> str:
        return summary_header(self.findings)

    @property
    def work(self) -> dict[str, Any]:
        """Each program's FLOPs and bytes: kept beside the artifact (never in it), so that its
        estimate follows the device table and the calibration as they are when asked."""
        return works_to_json(*build_works(self.build, self.chain))

    @property
    def extra_entries(self) -> list[Entry]:
        return [report_entry(self.verification)] if self.verification is not None else []

    @property
    def verified(self) -> bool | None:
        """Whether verification passed; None when it was not asked for."""
        return None if self.verification is None else bool(self.verification["passed"])


def build_program(
    request: KernelRequest, random_seed: int | None = None, ceilings: Ceilings = Ceilings()
) -> KernelBuild:
    """The request's program: a catalog kernel's, or a graph's; either held to `ceilings` (a
    package of functions to the defaults: its parts are catalog kernels of bounded params)."""
    options = {"target": request.target, "name": request.name, "random_seed": random_seed}
    match request.kind:
        case RequestKind.GRAPH:
            return build_graph(request.params, request.arrays(), ceilings=ceilings, **options)  # type: ignore[arg-type]
        case RequestKind.FUNCTIONS:
            return build_functions(
                request.op,
                request.params_json,
                request.functions,  # type: ignore[arg-type]
                request.arrays(),
                quantize=request.quantize,
                **options,
            )  # type: ignore[arg-type]
        case RequestKind.OP:
            return build_kernel(
                request.op,
                request.params,
                request.arrays(),
                quantize=request.quantize,
                ceilings=ceilings,
                **options,
            )  # type: ignore[arg-type]


def weight_bytes(build: KernelBuild) -> int:
    """Bytes the program's weight.bin holds (identical tensors counted each time; the functions
    of a package count once, since they share their weights: the largest function's)."""
    return max(
        sum(
            op.value.nbytes
            for op in part.program.blob_consts()
            if op.value is not None and not isinstance(op.value.data, str)
        )
        for part in build.function_builds
    )


# The preflight reads shapes, dtypes and small const arguments, never a weight's values: a catalog
# kernel's findings follow from its op, params, target and quantize config, so kernels that differ
# only in their weights (the layers of a model, a build farm's manifest) share them. A small
# kernel's preflight costs about as much as building its program.
_KERNEL_FINDINGS: dict[tuple, tuple[Finding, ...]] = {}
_KERNEL_FINDINGS_MAX = 1024


def _preflight(
    request: KernelRequest, build: KernelBuild, programs, budget: int
) -> tuple[Finding, ...]:
    """The ANE preflight's findings for the programs, then for the quantized weights."""
    memo = None
    # a kernel's params as JSON text: they may hold lists, which do not hash
    if request.kind is not RequestKind.GRAPH:
        params = orjson.dumps(request.params_json, option=orjson.OPT_SORT_KEYS)
        functions = orjson.dumps(
            list((request.functions or {}).items()), option=orjson.OPT_SORT_KEYS
        )
        memo = (request.op, params, request.target, request.quantize, budget, functions)
    if memo is not None and (known := _KERNEL_FINDINGS.get(memo)) is not None:
        return known
    options = PreflightOptions(budget)
    findings = tuple(f for p in programs for f in preflight(p.program, options=options)) + tuple(
        f
        for key, q in build.quantized.items()
        for f in quantization_findings(q.config, target=request.target, node=build.const_name(key))
    )
    if memo is not None:
        if len(_KERNEL_FINDINGS) >= _KERNEL_FINDINGS_MAX:
            del _KERNEL_FINDINGS[next(iter(_KERNEL_FINDINGS))]  # the oldest
        _KERNEL_FINDINGS[memo] = findings
    return findings


def prepare(
    request: KernelRequest, limits: Limits = Limits(), *, random_seed: int | None = None
) -> Prepared:
    """Build the request's program (missing weights drawn from `random_seed` when given), check
    its weights against the limits, run the ANE preflight (a strict request refuses an error),
    and verify it when the request asks to."""
    build = build_program(request, random_seed, limits.ceilings)
    size = weight_bytes(build)
    if limits.max_artifact_bytes is not None and size > limits.max_artifact_bytes:
        raise FieldError(
            "weights",
            f"this kernel's weights take {size} bytes, over the limit of "
            f"{limits.max_artifact_bytes} bytes per artifact",
            kind=ErrorKind.TOO_LARGE,
            title="Artifact too large",
            limit=limits.max_artifact_bytes,
        )
    budget = limits.max_program_weight_bytes
    chain = None
    splits = bool(getattr(request.params, "split", False))
    if request.kind is RequestKind.GRAPH and size > budget and not splits:
        raise RequestError(
            "split",
            f"the graph's weights take {size} bytes, over the budget of {budget} bytes per "
            f"program ({PROGRAM_WEIGHT_BUDGET_SETTING}); ask for split: true to get a chain of "
            "programs within it",
            title="Program too large",
            limit=budget,
        )
    if splits and size > budget and request.kind is RequestKind.FUNCTIONS:
        raise RequestError("functions", "a package of functions is one program: no split")
    if splits and size > budget:
        if request.artifact_format.compiled or request.format == "aimodel":
            raise RequestError("format", "a split program is packaged as mlpackage or mil programs")
        if request.kind is RequestKind.GRAPH:
            chain = split(build, budget, build.weights, request.target, build.name)  # type: ignore[arg-type]
        else:
            chain = split_stream(build, budget, request.target, build.name, request.quantize)
    # the preflight reads a package's functions one by one
    programs = chain.parts if chain is not None else build.function_builds
    findings = _preflight(request, build, programs, budget)
    error = first_error(findings) if request.preflight == "strict" else None
    if error is not None:
        raise RequestError(
            build.where(error.node),
            f"{error.rule}: {error.message}",
            title="Preflight failed",
            preflight=error.to_json(),
        )
    files = None
    if request.format == "aimodel":  # translated before anything is verified or written
        files = aimodel_of(build)
    if not request.verifies:
        return Prepared(request, build, findings, chain=chain, aimodel=files)
    limit = request.max_quantization_error
    try:
        if request.kind is RequestKind.FUNCTIONS:
            report = verify_functions(build, limit)  # type: ignore[arg-type]
        else:
            report = verify_build(build, chain=chain, max_quantization_error=limit)
    except RequestError as exc:  # too large to verify here
        raise RequestError(exc.field, exc.message, title="Cannot verify") from None
    quantization = report.get("quantization")
    if quantization is not None and not quantization["passed"]:
        raise RequestError(
            "max_quantization_error",
            f"quantizing moves an output by {quantization['max_rel_error']} (max|diff| / "
            f"max|exact| against the original weights), over the limit of {limit}",
            title="Quantization error too large",
            quantization=quantization,
        )
    if files is not None:
        report = with_apple_runtime(report, build, files)
    return Prepared(request, build, findings, report, chain, files)


def write(prepared: Prepared, out: BinaryIO, fmt: str | None = None) -> dict[str, Any]:
    """Package into `out` (written front to back, never seeked) in the request's format, or in
    `fmt` (a compiled format starts from its .mlpackage); returns kernel.json."""
    request = prepared.request
    # A digest is reusable only when packaging keeps the given bytes as they are (float32 or
    # float16); other dtypes are converted, and the converted tensor must be hashed.
    digests = {n: w.digest for n, w in request.weights.items() if w.dtype in ("float16", "float32")}
    preflight_json = {"preflight": findings_to_json(prepared.findings)}
    if request.kind is RequestKind.FUNCTIONS:
        preflight_json |= {
            "functions": prepared.build.describe_functions(),  # type: ignore[attr-defined]
            "default_function": prepared.build.program.default,
        }
    options = {
        "digests": digests,
        "extra_entries": prepared.extra_entries,
        "extra_description": preflight_json,
    }
    if (fmt or request.format) == "aimodel" and prepared.aimodel is not None:
        return write_aimodel_zip(prepared.build, prepared.aimodel, out, **options)
    if prepared.chain is not None:
        chain = prepared.chain
        return write_chain_zip(
            prepared.build, chain.parts, chain.to_json, out, fmt or request.format, **options
        )
    return write_kernel_zip(prepared.build, out, fmt or request.format, **options)


@dataclass(frozen=True)
class Stored:
    """An artifact a build put in place in a content store, ready to be indexed."""

    published: Published
    seconds: float
    content: bytes | None = None  # the zip itself, when small: the answer needs no read


def publish(
    prepared: Prepared, store: StoreLocation, key: str, meta: dict[str, Any], started: float
) -> Stored:
    """Write the zip into `store` (hashed while written) and put it in place under `key`. A full
    or unwritable store raises its storage fault (naming the bytes), with nothing left behind."""
    tmp = store.temp_path()
    written = 0
    try:
        with in_flight(tmp):  # a stop signal removes it
            with open(tmp, "wb") as f, DigestingWriter(f, keep_up_to=SMALL_ARTIFACT_BYTES) as out:
                try:
                    write(prepared, out)
                    digest, content = out.digest(), out.content()
                finally:
                    written = out.size
            meta = {
                **meta,
                "digest": digest,
                "filename": prepared.request.filename,
                "preflight": prepared.preflight_summary,
                "work": prepared.work,
            }
            published = publish_files(store, key, tmp, meta)
    except BaseException as exc:
        discard(tmp)
        if isinstance(exc, OSError):
            if exc.filename is None:  # a failed write names no file: it was this one
                exc.filename = str(tmp)
            needed = max(written, room_estimate(prepared))
            fault = storage_fault(exc, ARTIFACT_STORE, store.root, needed)
            if fault is not None:
                raise fault from None
        raise
    return Stored(published, time.perf_counter() - started, content)


def room_estimate(prepared: Prepared) -> int:
    """Bytes the zip will take, about: its weights (weight.bin dominates) and a margin for the
    program text, kernel.json and the zip's own headers."""
    return weight_bytes(prepared.build) + _ZIP_MARGIN


def build_and_publish(
    request: KernelRequest, store: StoreLocation, key: str, limits: Limits
) -> Stored:
    """What a build worker runs for one HTTP build."""
    started = time.perf_counter()
    prepared = prepare(request, limits)
    return publish(prepared, store, key, {"op": request.op, "format": request.format}, started)


def save(prepared: Prepared, path: str | Path) -> None:
    """Write the zip to `path`; an interrupted write leaves nothing behind."""
    with atomic_file(path) as f:
        write(prepared, f)


def zip_bytes(prepared: Prepared) -> bytes:
    # the program's weights, not the request's: weights drawn from a seed are not in the request
    if weight_bytes(prepared.build) < _IN_MEMORY_BYTES:
        buffer = io.BytesIO()
        write(prepared, buffer)
        return buffer.getvalue()
    with tempfile.TemporaryFile() as f:
        write(prepared, f)
        f.seek(0)
        return f.read()


def kernel_zip(
    op: str,
    params: dict[str, Any],
    weights: dict | None = None,
    *,
    format: str = "mlpackage",
    target: str = DEFAULT_TARGET,
    name: str | None = None,
    verify: bool = False,
    random_seed: int | None = None,
    quantize: dict[str, Any] | None = None,
    max_quantization_error: float | None = None,
    functions: dict[str, dict[str, Any]] | None = None,
) -> bytes:
    """The Python API: a catalog kernel's zip (mlpackage or mil bundle) as bytes.

    from app.artifacts import kernel_zip
    zip_bytes = kernel_zip("conv", {"in_channels": 64, "out_channels": 64, "spatial": 16},
                           {"weight": w}, format="mlpackage", target="ios18",
                           quantize={"mode": "palettize", "nbits": 4})
    """
    request = KernelRequest.create(
        op,
        params,
        weights,
        format=format,
        target=target,
        name=name,
        verify=verify,
        quantize=quantize,
        max_quantization_error=max_quantization_error,
        functions=functions,
    )
    if request.artifact_format.compiled:
        raise RequestError("format", f"{format} needs a compiler: use a service (ane-kernels jobs)")
    return zip_bytes(prepare(request, random_seed=random_seed))


def warm() -> bool:
    """Pay a build process's one-time costs (imports, the builder's first use) before its first
    real build."""
    import numpy as np

    request = KernelRequest.create(
        "conv",
        {"in_channels": 1, "out_channels": 1, "spatial": 1},
        {"weight": np.ones((1, 1), np.float32)},
    )
    prepare(request)
    return True
