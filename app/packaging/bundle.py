"""Zipped kernel artifacts: an .mlpackage, or the raw model.mil + weights bundle.

mlpackage zip:  <name>.mlpackage/Manifest.json
                <name>.mlpackage/Data/com.apple.CoreML/model.mlmodel
                <name>.mlpackage/Data/com.apple.CoreML/weights/weight.bin
                kernel.json
mil zip:        model.mil, weights/weight.bin, kernel.json
chain zip:      one package (or mil directory) per program, chain.json, kernel.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.formats import PACKAGED
from app.kernels import ProgramBuild
from app.mil import emit_text
from app.mil.to_proto import emit_proto
from app.packaging import layout
from app.packaging.describe import build_info, describe, to_json
from app.packaging.weight_file import plan_weights
from app.packaging.zipwriter import Entry, ZipSink, write_zip


def _uuid(*parts: bytes) -> str:
    """A UUID derived from content, so identical packages have identical manifests."""
    digest = hashlib.sha256(b"\0".join(parts)).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4)).upper()


def manifest(model_bytes: bytes, weights_key: bytes) -> bytes:
    """Manifest.json; `weights_key` identifies the weight contents (their digests)."""
    model_id = _uuid(b"model.mlmodel", model_bytes, weights_key)
    weights_id = _uuid(b"weights", model_bytes, weights_key)
    data = {
        "fileFormatVersion": "1.0.0",
        "itemInfoEntries": {
            model_id: {
                "author": "com.apple.CoreML",
                "description": "CoreML Model Specification",
                "name": "model.mlmodel",
                "path": "com.apple.CoreML/model.mlmodel",
            },
            weights_id: {
                "author": "com.apple.CoreML",
                "description": "CoreML Model Weights",
                "name": "weights",
                "path": "com.apple.CoreML/weights",
            },
        },
        "rootModelIdentifier": model_id,
    }
    return to_json(data)


@dataclass(frozen=True)
class ProgramFiles:
    """One program's files in a zip, and the kernel.json that describes it."""

    entries: list[Entry]
    empty_dirs: list[str]
    description: dict[str, Any]


def program_files(
    build: ProgramBuild,
    fmt: str,
    *,
    digests: Mapping[str, str] | None = None,
    extra_description: Mapping[str, Any] | None = None,
    prefix: str = "",
) -> ProgramFiles:
    """The files of `build` in format `fmt` (a mil bundle's under `prefix`, a package's under
    `<name>.mlpackage/`). `digests` may carry known weight digests (e.g. of uploaded blobs) to
    skip hashing."""
    if fmt not in PACKAGED:
        raise ValueError(f"{fmt!r} is not a packaging format; one of {', '.join(PACKAGED)}")
    program = build.program
    writer, offsets = plan_weights(program)
    info = build_info()
    description = describe_build(build, fmt, digests, extra_description)
    weights_entry = Entry("", stream=writer.write, size=writer.nbytes, compress=False)
    entries: list[Entry] = []
    empty_dirs = []
    if fmt == "mil":
        text = emit_text(program, offsets, info).encode()
        entries += [
            Entry(f"{prefix}{layout.MIL_TEXT}", text),
            _at(weights_entry, f"{prefix}{layout.MIL_WEIGHT_FILE}"),
        ]
    else:
        root = layout.package_root(build.name)
        metadata = {"com.github.apple.coremltools.version": info["coremltools-version"]}
        model = emit_proto(program, offsets, info, metadata)
        model_bytes = model.SerializeToString(deterministic=True)
        entries += [
            Entry(
                f"{root}/{layout.MANIFEST}", manifest(model_bytes, to_json(description["weights"]))
            ),
            Entry(f"{root}/{layout.MODEL_FILE}", model_bytes),
        ]
        if len(writer):
            entries.append(_at(weights_entry, f"{root}/{layout.PACKAGE_WEIGHT_FILE}"))
        else:
            empty_dirs.append(f"{root}/{layout.WEIGHTS_DIR}")  # coremltools also leaves it empty
    return ProgramFiles(entries, empty_dirs, description)


def describe_build(
    build: ProgramBuild,
    fmt: str,
    digests: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """kernel.json for a built program."""
    # a weight's const as the program holds it; one a pass folded into another (a scale into
    # a conv's weight) as it was built (the passes section says what became of it)
    ops = {op.name: op for op in build.built_program.main.operations}
    ops |= {op.name: op for op in build.program.main.operations}
    stored = {
        key: ops[build.const_name(key)].outputs[0].tensor.dtype.value for key in build.weights
    }
    if build.passes is not None:
        extra = {**(extra or {}), "passes": build.passes.to_json()}
    return describe(
        op=build.op_name,
        params=build.params.model_dump(mode="json"),
        name=build.name,
        fmt=fmt,
        program=build.program,
        weights=build.weights,
        stored=stored,
        quantized={key: q.to_json() for key, q in build.quantized.items()},
        digests=digests,
        extra=extra,
    )


def write_kernel_zip(
    build: ProgramBuild,
    f: ZipSink,
    fmt: str = "mlpackage",
    *,
    digests: Mapping[str, str] | None = None,
    extra_entries: Iterable[Entry] = (),
    extra_description: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the zip for `build` to `f` and return its kernel.json content."""
    files = program_files(build, fmt, digests=digests, extra_description=extra_description)
    kernel_json = Entry(layout.KERNEL_JSON, to_json(files.description))
    write_zip(f, [kernel_json, *extra_entries, *files.entries], files.empty_dirs)
    return files.description


def write_chain_zip(
    whole: ProgramBuild,
    parts: Sequence[ProgramBuild],
    chain: Callable[[list[str]], dict[str, Any]],
    f: ZipSink,
    fmt: str = "mlpackage",
    *,
    digests: Mapping[str, str] | None = None,
    extra_entries: Iterable[Entry] = (),
    extra_description: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A graph split into a chain of programs, in one zip: each program's files (a package each,
    or a mil bundle in its own directory), chain.json (the order and the wiring: `chain` gives it
    from the programs' paths) and kernel.json describing the whole graph."""
    description = describe_build(whole, fmt, digests, extra_description)
    # every part's weights are the whole's: hash each tensor once
    known = {key: w["sha256"] for key, w in description["weights"].items()}
    entries: list[Entry] = []
    empty_dirs: list[str] = []
    paths = []
    for part in parts:
        prefix = f"{part.name}/" if fmt == "mil" else ""
        files = program_files(part, fmt, digests=known, prefix=prefix)
        entries += files.entries
        empty_dirs += files.empty_dirs
        paths.append(part.name if fmt == "mil" else layout.package_root(part.name))
    description["chain"] = [p.name for p in parts]
    entries += [
        Entry(layout.KERNEL_JSON, to_json(description)),
        Entry(layout.CHAIN_JSON, to_json(chain(paths))),
        *extra_entries,
    ]
    write_zip(f, entries, empty_dirs)
    return description


def _at(entry: Entry, path: str) -> Entry:
    return dataclasses.replace(entry, path=path)
