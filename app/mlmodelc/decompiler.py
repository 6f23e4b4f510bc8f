"""`decompile`: a compiled `.mlmodelc` bundle -> an `.mlpackage` that compiles back to it.

The package's `model.mlmodel` is rebuilt from the bundle: specification version and
ModelDescription from `coremldata.bin` (the description's bytes kept as they are), the program
from `model.mil` minus what the compiler added (its `coremlc-*` buildInfo entries and the
FlexibleShapeInformation it derives from the description), with each function's inputs in the
description's order (states first; the text sorts them by name, the order is otherwise lost),
`isUpdatable` from metadata.json.
Weight files are copied. Compiling the package with the bundle's own toolchain profile gives
the bundle back, except the analytics file's hash of the source spec: that hashes the original
`model.mlmodel`, whose exact bytes the bundle does not keep.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from app.language.errors import BadBundleError, UnknownProfileError
from app.language.messages import MIL_pb2, Model_pb2
from app.language.parser import parse_program
from app.language.profiles import ToolchainProfile, get_profile
from app.mlmodelc.atomic import building, copy_file, write_file
from app.mlmodelc.blobrefs import blob_refs, check_refs, confined
from app.mlmodelc.compilerattrs import build_info_entries, build_info_value
from app.mlmodelc.coremldata import COREMLDATA, read_coremldata
from app.mlmodelc.wire import length_delimited, write_varint

COMPILER_KEYS = {"coremlc-component-MIL", "coremlc-version"}
SPEC_PATH = "com.apple.CoreML/model.mlmodel"
WEIGHTS_PATH = "com.apple.CoreML/weights"


@dataclass(frozen=True)
class DecompiledPackage:
    path: Path
    profile: ToolchainProfile | None  # the profile matching the bundle's buildInfo, if known
    files: tuple[str, ...]


def _read(bundle: Path, relative: str) -> bytes:
    path = bundle / relative
    if not path.is_file():
        raise BadBundleError(f"missing {relative}", str(bundle))
    return path.read_bytes()


def _source_program(program: MIL_pb2.Program) -> tuple[MIL_pb2.Program, ToolchainProfile | None]:
    """Strip what the compiler added; name the profile its buildInfo points to."""
    entries = build_info_entries(program)
    profile = _profile(entries.get("coremlc-version"), entries.get("coremlc-component-MIL"))
    kept = {k: v for k, v in entries.items() if k not in COMPILER_KEYS}
    if kept:
        program.attributes["buildInfo"].CopyFrom(build_info_value(kept))
    elif "buildInfo" in program.attributes:
        del program.attributes["buildInfo"]
    for fn in program.functions.values():
        if "FlexibleShapeInformation" in fn.attributes:
            del fn.attributes["FlexibleShapeInformation"]
    return program, profile


def _profile(coremlc_version: str | None, mil_version: str | None) -> ToolchainProfile | None:
    """The profile that writes this bundle's own version pair (None when it names no release)."""
    if coremlc_version is None:
        return None
    try:
        return get_profile(coremlc_version, mil_version)
    except UnknownProfileError:
        return None


def _order_inputs(program: MIL_pb2.Program, description: bytes) -> None:
    """Put each function's inputs back in the description's order (Apple's text sorts them by
    name): its states, then its inputs, then any the description does not name."""
    desc = Model_pb2.ModelDescription()
    desc.ParseFromString(description)
    features = {f.name: [*f.state, *f.input] for f in desc.functions}
    for name, fn in program.functions.items():
        order = [f.name for f in features.get(name, [*desc.state, *desc.input])]
        rank = {n: i for i, n in enumerate(order)}
        ordered = sorted(fn.inputs, key=lambda v: (rank.get(v.name, len(rank)), v.name))
        del fn.inputs[:]
        fn.inputs.extend(ordered)


def model_bytes(
    spec_version: int, description: bytes, program: MIL_pb2.Program, updatable: bool
) -> bytes:
    """A Model protobuf, fields in number order, the description's bytes verbatim."""
    out = write_varint(1 << 3) + write_varint(spec_version)
    out += length_delimited(2, description)
    if updatable:
        out += write_varint(10 << 3) + write_varint(1)
    return out + length_delimited(502, program.SerializeToString(deterministic=True))


def manifest(model: bytes) -> bytes:
    """Manifest.json as coremltools writes it (a spec item and a weights item), with
    identifiers derived from the model bytes so equal packages are byte-identical."""
    digest = hashlib.sha256(model).digest()
    model_id = str(uuid.UUID(bytes=digest[:16], version=4)).upper()
    weights_id = str(uuid.UUID(bytes=digest[16:], version=4)).upper()
    items = {
        model_id: {
            "author": "com.apple.CoreML",
            "description": "CoreML Model Specification",
            "name": "model.mlmodel",
            "path": SPEC_PATH,
        },
        weights_id: {
            "author": "com.apple.CoreML",
            "description": "CoreML Model Weights",
            "name": "weights",
            "path": WEIGHTS_PATH,
        },
    }
    data = {"fileFormatVersion": "1.0.0", "itemInfoEntries": items, "rootModelIdentifier": model_id}
    return json.dumps(data, indent=4).encode("utf-8")


def _updatable(bundle: Path) -> bool:
    path = bundle / "metadata.json"
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text("utf-8"))[0].get("isUpdatable") == "1"
    except (ValueError, IndexError, KeyError, AttributeError) as exc:
        raise BadBundleError(f"metadata.json does not parse ({exc})", str(path)) from None


def source_model(
    coremldata: bytes, model_mil: bytes | memoryview, updatable: bool = False, where: str = "bundle"
) -> tuple[bytes, MIL_pb2.Program, ToolchainProfile | None]:
    """The `model.mlmodel` bytes a bundle was compiled from, rebuilt from its `coremldata.bin`
    and `model.mil` (and the profile of the compiler that wrote it, when known); its program.
    `model_mil` may be a memory map's view (a kit's large stored entries are read mapped).
    Raises BadBundleError or MilSyntaxError naming the file under `where`."""
    spec_version, description = read_coremldata(coremldata, f"{where}/coremldata.bin")
    try:
        text = str(model_mil, "utf-8", "strict")
    except UnicodeDecodeError as exc:
        raise BadBundleError(f"model.mil is not UTF-8 ({exc})", f"{where}/model.mil") from None
    parsed = parse_program(text, f"{where}/model.mil")
    program, profile = _source_program(parsed.program)
    _order_inputs(program, description)
    return model_bytes(spec_version, description, program, updatable), program, profile


def decompile(bundle: Path | str, out: Path | str) -> DecompiledPackage:
    """Write an `.mlpackage` at `out` rebuilt from the `.mlmodelc` at `bundle`, atomically.

    Raises BadBundleError (a file missing or corrupt), MilSyntaxError (model.mil does not
    parse: line and column given), WeightFileError (model.mil refers to weights the bundle lacks)."""
    bundle, out = Path(bundle), Path(out)
    if not bundle.is_dir():
        raise BadBundleError("no such bundle directory", str(bundle))
    model, program, profile = source_model(
        _read(bundle, COREMLDATA),
        _read(bundle, "model.mil"),
        _updatable(bundle),
        str(bundle),
    )
    weights = check_refs(blob_refs(program), lambda rel: confined(bundle, rel), str(bundle))
    with building(out) as staging:
        write_file(staging, "Manifest.json", manifest(model))
        write_file(staging, f"Data/{SPEC_PATH}", model)
        # coremltools' loader needs the weights item's folder, even empty
        (staging / "Data" / WEIGHTS_PATH).mkdir(parents=True, exist_ok=True)
        for relative in weights:
            copy_file(confined(bundle, relative), staging, f"Data/com.apple.CoreML/{relative}")
    files = ["Manifest.json", f"Data/{SPEC_PATH}", *(f"Data/com.apple.CoreML/{r}" for r in weights)]
    return DecompiledPackage(out, profile, tuple(sorted(files)))
