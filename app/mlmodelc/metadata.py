"""`metadata.json`: every field derived from the model's description and program.

Fields (goldens): `shortDescription`, `version`, `author` (when the description's metadata has
them; `license` likewise, unseen), `metadataOutputVersion` "3.0", input/output/state schemas,
`modelParameters` [], `specificationVersion`, `storagePrecision` (when weights are stored),
`computePrecision`, `mlProgramOperationTypeHistogram` (ops other than `const`, Apple's display
names, see `opnames`), `isUpdatable`, `availability` (by specification version), `modelType`,
`userDefinedMetadata`, `generatedClassName`, `method` "predict"; for a multi-function model also
`functions` (name, schemas, histogram, computePrecision for each) and `defaultFunctionName`, the
top-level histogram and precisions then being the default function's.

Key order: each dictionary's keys are inserted in one fixed order per dictionary kind (found
to reproduce all 15 Apple-compiled metadata.json files at hand, see `nsjson`); the histogram's in
program order; `userDefinedMetadata` is an immutable dictionary filled in the order of the
description's map (Apple's order for it changes from run to run, see `coremldata`: where its
keys collide in the table, as three keys do, Apple's order follows that run's order). Where a key was never
seen (`license`, specification version 10's availability), its place and value are this
writer's choice.
"""

from __future__ import annotations

import re

from app.language.messages import Model_pb2
from app.mlmodelc import nsjson
from app.mlmodelc.schema import feature_entry
from app.mlmodelc.survey import FunctionSurvey
from app.mlmodelc.wire import read_fields

TOP_KEYS = (
    "shortDescription",
    "outputSchema",
    "version",
    "modelParameters",
    "author",
    "license",
    "stateSchema",
    "metadataOutputVersion",
    "specificationVersion",
    "functions",
    "availability",
    "modelType",
    "inputSchema",
    "generatedClassName",
    "isUpdatable",
    "storagePrecision",
    "defaultFunctionName",
    "userDefinedMetadata",
    "mlProgramOperationTypeHistogram",
    "computePrecision",
    "method",
)
FUNCTION_KEYS = (
    "name",
    "inputSchema",
    "outputSchema",
    "stateSchema",
    "mlProgramOperationTypeHistogram",
    "computePrecision",
)
PLATFORMS = ("iOS", "macCatalyst", "macOS", "tvOS", "visionOS", "watchOS")
# specification version -> (iOS, macCatalyst, macOS, tvOS, visionOS, watchOS); 6-9 are goldens.
AVAILABILITY = {
    6: ("15.0", "15.0", "12.0", "15.0", "1.0", "8.0"),
    7: ("16.0", "16.0", "13.0", "16.0", "1.0", "9.0"),
    8: ("17.0", "17.0", "14.0", "17.0", "1.0", "10.0"),
    9: ("18.0", "18.0", "15.0", "18.0", "2.0", "11.0"),
    10: ("26.0", "26.0", "26.0", "26.0", "26.0", "26.0"),
}


def class_name(bundle_stem: str) -> str:
    """`generatedClassName`: the bundle's name with every non-identifier character as `_`
    (golden: `silero-vad-unified-v6.0.0` -> `silero_vad_unified_v6_0_0`); a leading digit gets a
    `_` in front (unseen)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", bundle_stem)
    return f"_{name}" if name[:1].isdigit() else name


def user_defined_in_source_order(description: bytes) -> list[tuple[str, str]]:
    """`metadata.userDefined` as stored (a parsed protobuf map loses the order)."""
    pairs: list[tuple[str, str]] = []
    for field in read_fields(description):
        if field.number != 100:
            continue
        for entry in read_fields(field.payload):
            if entry.number != 100:
                continue
            key = value = ""
            for part in read_fields(entry.payload):
                if part.number == 1:
                    key = part.payload.decode("utf-8")
                elif part.number == 2:
                    value = part.payload.decode("utf-8")
            pairs.append((key, value))
    return pairs


def _schemas(features, where: str) -> list[dict[str, str]]:
    return [feature_entry(f, where) for f in features]


def _ordered(values: dict, order: tuple[str, ...]) -> dict:
    return {k: values[k] for k in order if k in values}


def build_metadata(
    model: Model_pb2.Model,
    description: bytes,
    bundle_stem: str,
    where: str,
    surveys: dict[str, FunctionSurvey],
) -> list[dict]:
    """The metadata.json object (a list holding one dictionary) for `model`, given its
    functions' surveys."""
    desc = model.description
    program = model.mlProgram
    default = desc.defaultFunctionName or (
        "main" if "main" in program.functions else min(program.functions)
    )
    survey = surveys[default]
    values: dict = {
        "metadataOutputVersion": "3.0",
        "modelParameters": [],
        "specificationVersion": model.specificationVersion,
        "mlProgramOperationTypeHistogram": survey.histogram,
        "isUpdatable": "1" if model.isUpdatable else "0",
        "modelType": {"name": "MLModelType_mlProgram"},
        "userDefinedMetadata": nsjson.FrozenDict(user_defined_in_source_order(description)),
        "generatedClassName": class_name(bundle_stem),
        "method": "predict",
    }
    meta = desc.metadata
    for key, text in (
        ("shortDescription", meta.shortDescription),
        ("version", meta.versionString),
        ("author", meta.author),
        ("license", meta.license),
        ("storagePrecision", survey.storage_precision),
        ("computePrecision", survey.compute_precision),
    ):
        if text:
            values[key] = text
    default_description = next((f for f in desc.functions if f.name == default), None)
    inputs = desc.input or (default_description.input if default_description else [])
    outputs = desc.output or (default_description.output if default_description else [])
    states = desc.state or (default_description.state if default_description else [])
    values["inputSchema"] = _schemas(inputs, where)
    values["outputSchema"] = _schemas(outputs, where)
    values["stateSchema"] = _schemas(states, where)
    platforms = AVAILABILITY.get(model.specificationVersion)
    if platforms is not None:
        values["availability"] = dict(zip(PLATFORMS, platforms, strict=True))
    if desc.functions:
        values["defaultFunctionName"] = default
        values["functions"] = [_function_entry(f, surveys[f.name], where) for f in desc.functions]
    return [_ordered(values, TOP_KEYS)]


def _function_entry(fd: Model_pb2.FunctionDescription, survey: FunctionSurvey, where: str) -> dict:
    where = f"{where}, function {fd.name}"
    entry = {
        "name": fd.name,
        "inputSchema": _schemas(fd.input, where),
        "outputSchema": _schemas(fd.output, where),
        "stateSchema": _schemas(fd.state, where),
        "mlProgramOperationTypeHistogram": survey.histogram,
    }
    if survey.compute_precision:
        entry["computePrecision"] = survey.compute_precision
    return _ordered(entry, FUNCTION_KEYS)


def metadata_json(
    model: Model_pb2.Model,
    description: bytes,
    bundle_stem: str,
    where: str,
    trailing_newline: bool,
    surveys: dict[str, FunctionSurvey],
) -> bytes:
    text = nsjson.dumps(build_metadata(model, description, bundle_stem, where, surveys))
    return (text + "\n" if trailing_newline else text).encode("utf-8")
