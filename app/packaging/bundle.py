"""Zipped kernel artifacts: an .mlpackage, or the raw model.mil + weights bundle.

mlpackage zip:  <name>.mlpackage/Manifest.json
                <name>.mlpackage/Data/com.apple.CoreML/model.mlmodel
                <name>.mlpackage/Data/com.apple.CoreML/weights/weight.bin
                kernel.json
mil zip:        model.mil, weights/weight.bin, kernel.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from app.mil import emit_proto, emit_text
from app.packaging.describe import build_info, describe, to_json
from app.packaging.weights import plan_weights
from app.packaging.zipwriter import Entry, write_zip

if TYPE_CHECKING:
    from app.kernels import KernelBuild

FORMATS = ("mlpackage", "mil")
DATA_DIR = "Data/com.apple.CoreML"


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


def write_kernel_zip(
    build: KernelBuild,
    f: BinaryIO,
    fmt: str = "mlpackage",
    *,
    digests: Mapping[str, str] | None = None,
    extra_entries: Iterable[Entry] = (),
    extra_description: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the zip for `build` to `f` and return its kernel.json content.

    `digests` may carry already-known weight digests (e.g. of uploaded blobs) to skip hashing.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    program = build.program
    writer, offsets = plan_weights(program)
    info = build_info()
    stored = {
        op.name: op.value.type.dtype.value for op in program.main.consts() if op.value is not None
    }
    description = describe(
        op=build.kernel.name,
        params=build.params.model_dump(mode="json"),
        name=build.name,
        fmt=fmt,
        program=program,
        weights=build.weights,
        stored=stored,
        digests=digests,
        extra=extra_description,
    )
    weights_entry = Entry("", stream=writer.write, size=writer.nbytes, compress=False)
    entries = [Entry("kernel.json", to_json(description)), *extra_entries]
    empty_dirs = []
    if fmt == "mil":
        text = emit_text(program, offsets, info).encode()
        entries += [Entry("model.mil", text), _at(weights_entry, "weights/weight.bin")]
    else:
        root = f"{build.name}.mlpackage"
        metadata = {"com.github.apple.coremltools.version": info["coremltools-version"]}
        model = emit_proto(program, offsets, info, metadata)
        model_bytes = model.SerializeToString(deterministic=True)
        entries += [
            Entry(f"{root}/Manifest.json", manifest(model_bytes, to_json(description["weights"]))),
            Entry(f"{root}/{DATA_DIR}/model.mlmodel", model_bytes),
        ]
        if len(writer):
            entries.append(_at(weights_entry, f"{root}/{DATA_DIR}/weights/weight.bin"))
        else:
            empty_dirs.append(f"{root}/{DATA_DIR}/weights")  # coremltools also leaves it empty
    write_zip(f, entries, empty_dirs)
    return description


def _at(entry: Entry, path: str) -> Entry:
    return dataclasses.replace(entry, path=path)
