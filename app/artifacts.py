"""The artifact builder: a request -> its zip, the one way every program is made.

    build -> size limit -> budget (or a chain within it) -> preflight -> translate -> verify
          -> package -> digest -> publish (or save, or return)

`prepare` builds the program and checks it, the same straight line for every request: a kernel
request (app/request.py: a catalog op, a package of functions, a graph) and a kit's program
(app/kits/programs.py) alike. What differs is asked of the request (`ProgramRequest`: how it
builds, whether it splits), of its build (app/kernels/catalog.py `ProgramBuild`: its preflight
key, its verification, what kernel.json says of it) and of its format's packager
(app/packagers.py), each chosen once. `write` packages it into a zip stream; `publish` writes that
zip into a content store and puts it in place under the request's key (safe in a build worker
process: the caller indexes it); `save` writes it to a path atomically; `zip_bytes` returns it.
HTTP builds, jobs, the CLI, the Python API and model kits all go through here; compiled
(.mlmodelc) artifacts start from `prepare` too.
"""

from __future__ import annotations

import io
import tempfile
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from app.cache.faults import ARTIFACT_STORE, storage_fault
from app.cache.hot import SMALL_ARTIFACT_BYTES
from app.cache.store import Published, StoreLocation, publish_files
from app.core.files import atomic_file, discard, in_flight
from app.errors import ErrorKind, FieldError, RequestError
from app.estimates import build_works, works_to_json
from app.graphs.split import Chain
from app.kernels import ProgramBuild
from app.language.targets import DEFAULT_TARGET
from app.mil.ceilings import Ceilings
from app.packagers import Packager, ZipContents, packager_for
from app.packaging import Entry, ZipSink
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
from app.reference.verify import report_entry, verify_build
from app.request import KernelRequest
from app.settings import DEFAULT_PROGRAM_WEIGHT_BUDGET, Settings

# Zips of weights up to this size are built in memory by `zip_bytes`; larger ones go through a
# temporary file, because a growing in-memory buffer would briefly hold a big zip twice.
_IN_MEMORY_BYTES = 16 << 20
_ZIP_MARGIN = 64 << 10


class ProgramRequest(Protocol):
    """What the builder asks of a request, whatever kind it is: a `KernelRequest`, a kit's
    program (app/kits/programs.py). A new kind of request implements these and goes through
    every step below unchanged."""

    @property
    def format(self) -> str: ...  # which packager writes it (app/packagers.py)

    @property
    def preflight(self) -> str: ...  # "strict": a preflight error refuses the request

    @property
    def verifies(self) -> bool: ...

    @property
    def max_quantization_error(self) -> float | None: ...

    @property
    def known_digests(self) -> Mapping[str, str]: ...  # weight digests packaging may reuse

    def build(
        self, random_seed: int | None, ceilings: Ceilings, weight_budget: int | None
    ) -> ProgramBuild:
        """The program, its weights checked (missing ones drawn from `random_seed` when given),
        every value held to `ceilings`; weights that come from files too large for one program
        (`weight_budget`) refused before they are read, when the request can tell."""
        ...

    def splits_within(self, weight_bytes: int, budget: int) -> bool:
        """Whether a build of `weight_bytes` is cut into a chain within `budget` (or refused)."""
        ...

    def split(self, build: ProgramBuild, budget: int) -> Chain:
        """The build as a chain of programs, each within `budget`."""
        ...


Request = TypeVar("Request", bound=ProgramRequest)


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

    def check_artifact(self, weight_bytes: int) -> None:
        """Refuse an artifact whose weights are over `max_artifact_bytes` (413)."""
        if self.max_artifact_bytes is not None and weight_bytes > self.max_artifact_bytes:
            raise FieldError(
                "weights",
                f"this kernel's weights take {weight_bytes} bytes, over the limit of "
                f"{self.max_artifact_bytes} bytes per artifact",
                kind=ErrorKind.TOO_LARGE,
                title="Artifact too large",
                limit=self.max_artifact_bytes,
            )


@dataclass(frozen=True)
class Prepared(Generic[Request]):
    """A request built and checked, with what goes into its zip beside the program."""

    request: Request
    build: ProgramBuild
    findings: tuple[Finding, ...] = ()  # the ANE preflight's, in program order
    verification: dict[str, Any] | None = None  # the reference report, when asked for
    chain: Chain | None = None  # a program split into programs within the budget
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


def weight_bytes(build: ProgramBuild) -> int:
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


def prepare(
    request: Request, limits: Limits = Limits(), *, random_seed: int | None = None
) -> Prepared[Request]:
    """Build the request's program (missing weights drawn from `random_seed` when given), check
    its weights against the limits (cut into a chain when it asks), run the ANE preflight (a
    strict request refuses an error), translate it when its format has a form of its own, and
    verify it when the request asks to."""
    packager = packager_for(request.format)
    build = request.build(random_seed, limits.ceilings, limits.max_program_weight_bytes)
    size = weight_bytes(build)
    limits.check_artifact(size)
    budget = limits.max_program_weight_bytes
    chain = None
    if request.splits_within(size, budget):
        packager.check_chain()
        chain = request.split(build, budget)
    findings = preflight_findings(build, chain, budget)
    if request.preflight == "strict":
        refuse_errors(build, findings)
    packager.check_io(build, chain)
    files = packager.translate(build)  # refused before anything is verified or written
    verification = None
    if request.verifies:
        verification = _verify(build, chain, request.max_quantization_error, packager, files)
    return Prepared(request, build, findings, verification, chain, files)


# A small kernel's preflight costs about as much as building its program: findings are kept by
# the build's preflight key (and the budget), so builds that share one (kernels that differ only
# in their weights, the same kit built again) share them.
_FINDINGS: dict[Hashable, tuple[Finding, ...]] = {}
_FINDINGS_MAX = 1024


def preflight_findings(
    build: ProgramBuild, chain: Chain | None, budget: int
) -> tuple[Finding, ...]:
    """The ANE preflight's findings for each program (a chain's parts, a package's functions one
    by one), then for the quantized weights."""
    key = build.preflight_key()
    memo = None if key is None else (key, budget)
    if memo is not None and (known := _FINDINGS.get(memo)) is not None:
        return known
    options = PreflightOptions(budget)
    programs = chain.parts if chain is not None else build.function_builds
    target = build.target.name
    findings = tuple(f for p in programs for f in preflight(p.program, options=options)) + tuple(
        f
        for key, q in build.quantized.items()
        for f in quantization_findings(q.config, target=target, node=build.const_name(key))
    )
    if memo is not None:
        if len(_FINDINGS) >= _FINDINGS_MAX:
            del _FINDINGS[next(iter(_FINDINGS))]  # the oldest
        _FINDINGS[memo] = findings
    return findings


def refuse_errors(build: ProgramBuild, findings: tuple[Finding, ...]) -> None:
    """A strict request's refusal of the first preflight error, naming the field behind it."""
    error = first_error(findings)
    if error is not None:
        raise RequestError(
            build.where(error.node),
            f"{error.rule}: {error.message}",
            title="Preflight failed",
            preflight=error.to_json(),
        )


def _verify(
    build: ProgramBuild,
    chain: Chain | None,
    limit: float | None,
    packager: Packager,
    files: dict[str, bytes] | None,
) -> dict[str, Any]:
    """The verification report (a chain run program after program), refused when quantizing
    moved an output further than `limit`; with what the format's runtime adds."""
    try:
        report = build.verify(partial(verify_build, chain=chain, max_quantization_error=limit))
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
    return packager.verified(report, build, files)


def write(prepared: Prepared, out: ZipSink, fmt: str | None = None) -> dict[str, Any]:
    """Package into `out` (written front to back, never seeked) in the request's format, or in
    `fmt` (a compiled format starts from its .mlpackage); returns kernel.json."""
    description = {"preflight": findings_to_json(prepared.findings), **prepared.build.describe()}
    contents = ZipContents(
        prepared.request.known_digests,
        prepared.extra_entries,
        description,
        prepared.chain,
        prepared.aimodel,
    )
    packager = packager_for(fmt or prepared.request.format, prepared.chain)
    return packager.write(prepared.build, out, contents)


@dataclass(frozen=True)
class Stored:
    """An artifact a build put in place in a content store, ready to be indexed."""

    published: Published
    seconds: float
    content: bytes | None = None  # the zip itself, when small: the answer needs no read


def publish(
    prepared: Prepared[KernelRequest],
    store: StoreLocation,
    key: str,
    meta: dict[str, Any],
    started: float,
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


def room_estimate(prepared: Prepared[KernelRequest]) -> int:
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


def zip_bytes(prepared: Prepared[KernelRequest]) -> bytes:
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
