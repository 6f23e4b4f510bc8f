"""A packager per format: what each format asks of the builder, and how it writes the zip.

    mlpackage, mil   the program's files; a chain of programs (a graph split within the weight
                     budget) in one zip when `Chained` wraps the format's packager
    aimodel          the program translated into a Core AI asset before anything is verified or
                     written; Apple's runtime verifies it beside the reference executor
    mlmodelc         compiled from the program's .mlpackage (app/compile writes it with the
                     mlpackage packager, then compiles)

`aimodel` and `mlmodelc` hold one program, never a chain. The builder (app/artifacts.py) picks the
packager once, by the format, and asks it the same questions whatever it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.formats import FORMATS
from app.coreai.package import aimodel_of, write_aimodel_zip
from app.errors import RequestError
from app.graphs.split import Chain
from app.kernels import ProgramBuild
from app.language.dtypes import DType
from app.packaging import Entry, ZipSink, write_chain_zip, write_kernel_zip
from app.reference.apple import with_apple_runtime


@dataclass(frozen=True)
class ZipContents:
    """What goes into a zip beside the program, whatever the format."""

    digests: Mapping[str, str]  # weight digests the packager may reuse instead of hashing
    extra_entries: Iterable[Entry]  # verification.json, when verified
    extra_description: Mapping[str, Any]  # kernel.json's preflight and the build's own part
    chain: Chain | None = None  # the programs of a split
    files: dict[str, bytes] | None = None  # the format's own form of the program (translate)

    @property
    def options(self) -> dict[str, Any]:
        """The keywords every zip writer of app/packaging and app/coreai takes."""
        return {
            "digests": self.digests,
            "extra_entries": self.extra_entries,
            "extra_description": self.extra_description,
        }


@dataclass(frozen=True)
class Packager:
    """A format whose zip holds the program's files as they are (mlpackage, mil), or compiled
    from them (mlmodelc)."""

    format: str

    @property
    def holds_chain(self) -> bool:
        """Whether a chain of programs can be packaged in this format."""
        return not FORMATS[self.format].compiled

    def check_chain(self) -> None:
        """Refuse a split before any part of it is built, when this format cannot hold one."""
        if not self.holds_chain:
            raise RequestError("format", "a split program is packaged as mlpackage or mil programs")

    def check_io(self, build: ProgramBuild, chain: Chain | None) -> None:
        """Refuse, naming it, an input or output of the program (or of a chain's parts) that
        the format cannot describe: a Core ML model's are arrays of a few dtypes only (a
        comparison's bool output is not one of them)."""
        if not FORMATS[self.format].core_ml_io:
            return
        parts = chain.parts if chain is not None else (build,)
        functions = [fn for part in parts for fn in part.program.functions.values()]
        ends = [("inputs", v) for fn in functions for v in fn.inputs]
        ends += [("outputs", v) for fn in functions for v in fn.outputs]
        for where, value in ends:
            dtype = value.tensor.dtype
            if not dtype.can_be_io:
                allowed = ", ".join(d.value for d in DType if d.can_be_io)
                raise RequestError(
                    f"{where}.{value.name}",
                    f"{dtype.value} cannot be a Core ML model's {where[:-1]} ({allowed} can) in "
                    f'format {self.format}: cast it in the graph, or ask for format "mil" or '
                    '"aimodel"',
                )

    def translate(self, build: ProgramBuild) -> dict[str, bytes] | None:
        """The format's own form of the program, made (and refused) before anything is
        verified or written; None: the format writes the program itself."""
        return None

    def verified(
        self, report: dict[str, Any], build: ProgramBuild, files: dict[str, bytes] | None
    ) -> dict[str, Any]:
        """The reference verification's report, with what the format's own runtime adds."""
        return report

    def write(self, build: ProgramBuild, out: ZipSink, contents: ZipContents) -> dict[str, Any]:
        """Write the zip into `out` front to back; returns kernel.json."""
        return write_kernel_zip(build, out, self.format, **contents.options)


@dataclass(frozen=True)
class Chained(Packager):
    """A chain of programs in one zip, each packaged in the format (app/packaging/bundle.py)."""

    def write(self, build: ProgramBuild, out: ZipSink, contents: ZipContents) -> dict[str, Any]:
        chain = contents.chain
        assert chain is not None
        return write_chain_zip(
            build, chain.parts, chain.to_json, out, self.format, **contents.options
        )


@dataclass(frozen=True)
class Aimodel(Packager):
    """A Core AI asset (app/coreai): one program, refused naming the node Core AI cannot
    express, verified by Apple's runtime too."""

    format: str = "aimodel"

    @property
    def holds_chain(self) -> bool:
        return False

    def translate(self, build: ProgramBuild) -> dict[str, bytes] | None:
        return aimodel_of(build)

    def verified(
        self, report: dict[str, Any], build: ProgramBuild, files: dict[str, bytes] | None
    ) -> dict[str, Any]:
        assert files is not None
        return with_apple_runtime(report, build, files)

    def write(self, build: ProgramBuild, out: ZipSink, contents: ZipContents) -> dict[str, Any]:
        assert contents.files is not None
        return write_aimodel_zip(build, contents.files, out, **contents.options)


PACKAGERS: dict[str, Packager] = {
    "mlpackage": Packager("mlpackage"),
    "mil": Packager("mil"),
    "aimodel": Aimodel(),
    "mlmodelc": Packager("mlmodelc"),
}


def packager_for(fmt: str, chain: Chain | None = None) -> Packager:
    """The format's packager; for a chain, the format's programs in one zip."""
    return Chained(fmt) if chain is not None else PACKAGERS[fmt]
