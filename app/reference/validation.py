"""Structural validation of kernel artifacts with coremltools' own loader, plus the checks it skips.

coremltools' milproto loader re-creates every op through its builder (input checks + type
inference) and reads every blob; it does not compare the model description with the program nor a
const's declared type with its value, so those are checked here too.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.blob import BlobFormatError, BlobReader
from app.core.toolchain import quiet_coremltools
from app.language.targets import ALL_TARGETS
from app.mil import DType
from app.mlmodelc import COREMLDATA
from app.packaging import layout

# The opset of each ML Program specification version, ours and the ones Apple-compiled bundles
# may hold, which the loader checks as well.
OPSETS = {t.spec_version: t.opset for t in ALL_TARGETS.values()}


class InvalidArtifact(ValueError):
    """The artifact is not valid; the message says why."""


@dataclass
class Report:
    kind: str  # "mlpackage", "mlmodelc", "mil" or "aimodel"
    path: str
    ops: int = 0
    weights: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """What was counted; for an .aimodel (no ops to count here), what was checked."""
        if self.kind == "aimodel":
            return "; ".join(self.notes)
        return f"{self.ops} ops, {self.weights} weight blobs"


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[Path]:
    """A directory holding the artifact: the path itself, or a zip extracted to a temp dir."""
    if path.is_dir():
        yield path
        return
    if not zipfile.is_zipfile(path):
        raise InvalidArtifact(f"{path} is neither a directory nor a zip file")
    with tempfile.TemporaryDirectory(prefix="ane-validate-") as tmp, zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.startswith("/") or ".." in Path(name).parts:
                raise InvalidArtifact(f"unsafe path in zip: {name}")
        zf.extractall(tmp)
        yield Path(tmp)


def validate(path: str | Path) -> Report:
    path = Path(path)
    if not path.exists():
        raise InvalidArtifact(f"{path} does not exist")
    with _opened(path) as root:
        suffix = layout.PACKAGE_SUFFIX
        packages = [root] if root.suffix == suffix else sorted(root.glob(f"*{suffix}"))
        if packages:
            return _validate_mlpackage(packages[0], str(path))
        bundles = [root] if (root / COREMLDATA).is_file() else sorted(root.glob("*.mlmodelc"))
        if bundles:
            return _validate_mlmodelc(bundles[0], str(path))
        if (root / layout.MIL_TEXT).is_file():
            return _validate_mil(root, str(path))
        assets = [root] if root.suffix == ".aimodel" else sorted(root.glob("*.aimodel"))
        if assets:
            from app.coreai.check import check_aimodel

            try:
                notes = check_aimodel(assets[0])
            except ValueError as exc:
                raise InvalidArtifact(f"{assets[0].name}: {exc}") from None
            return Report("aimodel", str(path), notes=notes)
    raise InvalidArtifact(
        f"{path} holds neither an .mlpackage, an .mlmodelc, a model.mil nor an .aimodel"
    )


def _validate_mlmodelc(bundle: Path, shown: str) -> Report:
    """An .mlmodelc (ours or Apple's): the package it was compiled from, rebuilt from its
    model.mil and coremldata.bin (app/mlmodelc), through the package checks."""
    from app.language.errors import MlmodelcError
    from app.mlmodelc import decompile

    with tempfile.TemporaryDirectory(prefix="ane-validate-") as tmp:
        try:
            package = decompile(bundle, Path(tmp) / "source.mlpackage").path
        except MlmodelcError as exc:
            raise InvalidArtifact(f"{bundle.name}: {exc}") from None
        report = _validate_mlpackage(package, shown)
    report.kind = "mlmodelc"
    return report


def _quiet_import():
    with quiet_coremltools():
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load
    return ct, load


def _validate_mlpackage(pkg: Path, shown: str) -> Report:
    ct, milproto_load = _quiet_import()
    try:
        model = ct.models.MLModel(str(pkg), skip_model_load=True)
    except Exception as exc:
        raise InvalidArtifact(f"not a loadable package: {exc}") from None
    spec = model.get_spec()
    if spec.WhichOneof("Type") != "mlProgram":
        raise InvalidArtifact("the model is not an ML Program")
    opset = OPSETS.get(spec.specificationVersion)
    if opset is None:
        raise InvalidArtifact(f"unsupported specificationVersion {spec.specificationVersion}")
    weights_dir = Path(model.weights_dir)
    report = Report("mlpackage", shown)
    if (weights_dir / "weight.bin").exists():
        report.weights = _check_blob(weights_dir / "weight.bin")
    for fn_name, fn in spec.mlProgram.functions.items():
        if fn.opset != opset:
            raise InvalidArtifact(f"function {fn_name}: opset {fn.opset!r}, expected {opset!r}")
        for op in fn.block_specializations[fn.opset].operations:
            if "name" not in op.attributes:
                raise InvalidArtifact(f"an op of type {op.type} has no name attribute")
            if op.type == "const" and op.outputs[0].type != op.attributes["val"].type:
                raise InvalidArtifact(
                    f"const {op.outputs[0].name}: output type differs from its value"
                )
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            prog = milproto_load(
                spec,
                specification_version=spec.specificationVersion,
                file_weights_dir=str(weights_dir),
            )
            prog._check_early_error_out_for_invalid_program()
    except Exception as exc:  # the loader raises many types; all mean "invalid"
        raise InvalidArtifact(
            f"coremltools rejected the program: {type(exc).__name__}: {exc}"
        ) from None
    if spec.description.functions:  # a multifunction package: described function by function
        described = {f.name: f for f in spec.description.functions}
        if (
            set(described) != set(prog.functions)
            or spec.description.defaultFunctionName not in described
        ):
            raise InvalidArtifact(
                f"description functions {sorted(described)} (default "
                f"{spec.description.defaultFunctionName!r}) != program "
                f"functions {sorted(prog.functions)}"
            )
        for fn_name, fn in prog.functions.items():
            _check_description(described[fn_name], fn)
        report.ops = sum(len(fn.operations) for fn in prog.functions.values())
        return report
    main = prog.functions["main"]
    _check_description(spec.description, main)
    report.ops = len(main.operations)
    return report


def _check_description(description, main) -> None:
    from coremltools.converters.mil.mil import types

    def check(features, vars_, what: str) -> None:
        if [f.name for f in features] != [v.name for v in vars_]:
            raise InvalidArtifact(
                f"description {what} {[f.name for f in features]} != program {what}"
            )
        for feature, var in zip(features, vars_, strict=True):
            kind = feature.type.WhichOneof("Type")
            array = (
                feature.type.stateType.arrayType
                if kind == "stateType"
                else feature.type.multiArrayType
            )
            var_type = var.sym_type.wrapped_type() if types.is_state(var.sym_type) else var.sym_type
            if tuple(array.shape) != tuple(var_type.get_shape()):
                raise InvalidArtifact(
                    f"{what} {var.name}: description shape {list(array.shape)} != program"
                )
            dtype = types.builtin_to_string(var_type.get_primitive())
            described = DType.from_feature_type(array.dataType)
            if described is None or described.value != dtype:
                raise InvalidArtifact(
                    f"{what} {var.name}: description dtype != program dtype {dtype}"
                )

    inputs = [v for v in main.inputs.values() if not _is_state(v)]
    states = [v for v in main.inputs.values() if _is_state(v)]
    check(description.input, inputs, "input")
    check(description.state, states, "state")
    check(description.output, main.outputs, "output")


def _is_state(var) -> bool:
    from coremltools.converters.mil.mil import types

    return types.is_state(var.sym_type)


def _check_blob(path: Path) -> int:
    try:
        return len(BlobReader(str(path)).check())
    except BlobFormatError as exc:
        raise InvalidArtifact(f"{path.name}: {exc}") from None


def _validate_mil(root: Path, shown: str) -> Report:
    """Checks the weight file, then parses model.mil back through the builder (every op's types
    re-inferred and compared with the declared ones, every BLOBFILE read at its offset)."""
    from app.mil import MILParseError, parse_text

    blob_path = root / layout.MIL_WEIGHT_FILE
    report = Report("mil", shown)
    if blob_path.exists():
        report.weights = _check_blob(blob_path)
    try:
        parsed = parse_text(
            (root / layout.MIL_TEXT).read_text(), blob_path if blob_path.exists() else None
        )
    except (MILParseError, UnicodeDecodeError) as exc:
        raise InvalidArtifact(f"model.mil: {exc}") from None
    report.ops = sum(len(fn.operations) for fn in parsed.program.functions.values())
    kernel_json = root / layout.KERNEL_JSON
    if kernel_json.exists():
        try:
            json.loads(kernel_json.read_text())
        except ValueError as exc:
            raise InvalidArtifact(f"kernel.json is not JSON: {exc}") from None
    return report
