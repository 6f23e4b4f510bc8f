"""`compile_package`: an ML Program package -> the `.mlmodelc` bundle Apple's compiler writes.

For ML Programs `coremlcompiler compile` does no ANE compilation (Core ML does that when it
loads the model); it writes

    model.mil                 the program as text (`printer`), with its buildInfo entries
    coremldata.bin            header + ModelDescription (`coremldata`)
    analytics/coremldata.bin  hash and name of the source spec (`analytics`)
    metadata.json             schemas, op histogram, precisions, availability (`metadata`)
    weights/...               the weight files, copied byte for byte

all of which this module writes on any OS, as the chosen toolchain profile would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.language.errors import BadPackageError
from app.language.messages import MIL_pb2
from app.language.printer import print_program
from app.language.profiles import DEFAULT_PROFILE, ToolchainProfile, dialect_for, get_profile
from app.mlmodelc.analytics import write_analytics
from app.mlmodelc.atomic import building, copy_file, write_file
from app.mlmodelc.blobrefs import check_refs, program_attribute_refs
from app.mlmodelc.compilerattrs import build_info, flexible_shape_information
from app.mlmodelc.coremldata import COREMLDATA, canonical_description, write_coremldata
from app.mlmodelc.metadata import metadata_json
from app.mlmodelc.source import SourceModel, read_source
from app.mlmodelc.survey import FunctionSurvey, survey_program

BUNDLE_SUFFIX = ".mlmodelc"


@dataclass(frozen=True)
class CompiledBundle:
    path: Path
    profile: ToolchainProfile
    program_version: str  # "1.0" or "1.3"
    files: tuple[str, ...]  # relative paths written, sorted
    # metadata.json histogram names no Apple bundle has shown for their opset (app/mlmodelc/
    # opnames.py chose them by rule): a report says so rather than guessing silently
    unobserved_op_names: tuple[str, ...] = ()


def model_mil(source: SourceModel, profile: ToolchainProfile) -> str:
    """The `model.mil` text `profile`'s compiler writes for this source."""
    model = source.model
    program = model.mlProgram
    function_attributes: dict[str, dict[str, MIL_pb2.Value]] = {}
    if profile.writes_flexible_shape_info:
        for name in program.functions:
            info = flexible_shape_information(
                model.description, name, f"{source.label}, function {name}"
            )
            if info is not None:
                function_attributes[name] = {"FlexibleShapeInformation": info}
    return print_program(
        program,
        dialect_for(model.specificationVersion),
        program_attributes={"buildInfo": build_info(program, profile.build_info())},
        function_attributes=function_attributes,
        trailing_newline=profile.text_ends_with_newline,
        where=source.label,
    )


def bundle_files(
    source: SourceModel,
    bundle_stem: str,
    profile: ToolchainProfile,
    surveys: dict[str, FunctionSurvey],
) -> dict[str, bytes]:
    """Every generated file of the bundle (weights excluded), by relative path, given the
    program's function surveys."""
    description = canonical_description(source.description, source.label)
    return {
        "model.mil": model_mil(source, profile).encode("utf-8"),
        COREMLDATA: write_coremldata(source.model.specificationVersion, description),
        "analytics/coremldata.bin": write_analytics(source.model_bytes, source.model_name),
        "metadata.json": metadata_json(
            source.model,
            description,
            bundle_stem,
            source.label,
            profile.text_ends_with_newline,
            surveys,
        ),
    }


def _surveys(program: MIL_pb2.Program, label: str) -> dict[str, FunctionSurvey]:
    for name, fn in program.functions.items():
        if fn.opset not in fn.block_specializations:
            raise BadPackageError(
                f"no block for the function's opset {fn.opset!r}", f"{label}, function {name}"
            )
    return survey_program(program)


def compile_package(
    src: Path | str,
    out: Path | str,
    profile: ToolchainProfile | str = DEFAULT_PROFILE,
    *,
    weights_dir: Path | str | None = None,
    link_weights: bool = False,
) -> CompiledBundle:
    """Write the `.mlmodelc` for `src` (an `.mlpackage` directory, or an `.mlmodel` with
    `weights_dir` standing for its `@model_path/weights`) at `out`, atomically.

    Raises BadPackageError (unreadable / not an ML Program), WeightFileError (a BLOBFILE whose
    file is absent or whose offset is past its end), UnsupportedConstructError (a construct
    whose Apple spelling is unknown), UnknownProfileError (`profile` names no known release).
    Nothing is left at `out` (or beside it) on error. `link_weights`: the bundle's weight files
    are hard links to the source's where possible (a caller compiling its own scratch package,
    which it never changes after), not copies."""
    if isinstance(profile, str):
        profile = get_profile(profile)
    out = Path(out)
    source = read_source(Path(src), Path(weights_dir) if weights_dir is not None else None)
    program = source.model.mlProgram
    surveys = _surveys(program, source.label)
    refs = program_attribute_refs(program) + [r for s in surveys.values() for r in s.refs]
    weights = check_refs(refs, source.locate, source.label)
    stem = out.name[: -len(BUNDLE_SUFFIX)] if out.name.endswith(BUNDLE_SUFFIX) else out.name
    files = bundle_files(source, stem, profile, surveys)
    with building(out) as staging:
        for relative, data in files.items():
            write_file(staging, relative, data)
        for relative in weights:
            copy_file(source.locate(relative), staging, relative, link=link_weights)
    return CompiledBundle(
        path=out,
        profile=profile,
        program_version=dialect_for(source.model.specificationVersion).version,
        files=tuple(sorted([*files, *weights])),
        unobserved_op_names=tuple(sorted({n for s in surveys.values() for n in s.unobserved})),
    )


def unobserved_note(bundle: CompiledBundle) -> str | None:
    """One line for a compile log, or None when every histogram name was observed."""
    if not bundle.unobserved_op_names:
        return None
    return (
        "metadata.json op names never observed in an Apple-compiled bundle for their opset "
        f"(chosen by rule, app/mlmodelc/opnames.py): {', '.join(bundle.unobserved_op_names)}"
    )
