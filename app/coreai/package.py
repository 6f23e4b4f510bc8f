"""`format: "aimodel"`: a built program as a Core AI asset in a zip.

    <name>.aimodel/main.mlirb      the program (MLIR bytecode, weights inline)
    <name>.aimodel/main.hash       sha256 of main.mlirb
    <name>.aimodel/metadata.json
    kernel.json                    as for every format, plus `coreai` (version, sub-byte note)
    verification.json              when verified: the reference executor and Apple's runtime

`aimodel_of` refuses what Core AI cannot express, naming the node, before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.coreai.asset import SUFFIX, aimodel_files
from app.coreai.availability import require_coreai
from app.coreai.translate import TranslationError, Untranslatable, translate, untranslatable
from app.coreai.weights import SUBBYTE_NOTE
from app.errors import RequestError
from app.kernels import ProgramBuild
from app.packaging import Entry, ZipSink, write_zip
from app.packaging.bundle import describe_build
from app.packaging.describe import to_json
from app.packaging.layout import KERNEL_JSON

FORMAT = "aimodel"


def aimodel_of(build: ProgramBuild) -> dict[str, bytes]:
    """The `.aimodel` files of `build`; 503 without coreai-core, 422 naming the node Core AI
    cannot express."""
    require_coreai()
    found = untranslatable(build.program)
    if found is not None:
        raise _refusal(build, found)
    try:
        return aimodel_files(translate(build.program))
    except TranslationError as exc:
        raise _refusal(build, exc.found) from None
    except RuntimeError as exc:  # Core AI's own verifier rejected the translated program
        raise RequestError(
            "format", f"Core AI rejected the program: {exc}", title="Not expressible in Core AI"
        ) from None


def _refusal(build: ProgramBuild, found: Untranslatable) -> RequestError:
    return RequestError(
        build.where(found.op.name),
        f"{found.reason} (op {found.op.name!r} of function {found.function!r}); the formats "
        "mlpackage, mil and mlmodelc can hold it",
        title="Not expressible in Core AI",
        op=found.op.type,
        node=found.op.name,
    )


def subbyte_weights(build: ProgramBuild) -> list[str]:
    """The constants stored in a sub-byte dtype (packed: see SUBBYTE_NOTE)."""
    return sorted(
        op.name
        for fn in build.program.functions.values()
        for op in fn.consts()
        if op.outputs[0].tensor.dtype.is_subbyte
    )


def write_aimodel_zip(
    build: ProgramBuild,
    files: Mapping[str, bytes],
    out: ZipSink,
    *,
    digests: Mapping[str, str] | None = None,
    extra_entries: Iterable[Entry] = (),
    extra_description: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the zip to `out`; returns its kernel.json content."""
    description = describe_build(build, FORMAT, digests, extra_description)
    description["coreai"] = {
        "version": require_coreai(),
        "graphs": list(build.program.functions),
        "subbyte_weights": subbyte_weights(build),
        "subbyte_packing": SUBBYTE_NOTE,
    }
    root = f"{build.name}{SUFFIX}"
    entries = [Entry(f"{root}/{name}", data, compress=False) for name, data in files.items()]
    write_zip(out, [Entry(KERNEL_JSON, to_json(description)), *extra_entries, *entries])
    return description
