"""metadata.json rules checked against Apple-compiled bundles beyond the full goldens.

The five golden bundles are compared byte for byte elsewhere. Here the rules are held to facts
read off ten more Apple-compiled metadata.json files (key orders, op display names, precisions)
that are not fixtures: FluidAudio's Parakeet EOU bundles (encoder, preprocessor, decoder, joint),
Argmax and TransposeEncoder, mobius' KokoroNoise, and mlmodelc-export's 3520/3600 fixtures,
whose model.mil texts are in tests/fixtures/goldens/apple-mil-text.
"""

from __future__ import annotations

import itertools

import pytest
from mlmodelc_support import GOLDENS

from app.language.parser import parse_program
from app.mlmodelc.metadata import FUNCTION_KEYS, PLATFORMS, TOP_KEYS, class_name
from app.mlmodelc.nsjson import FrozenDict, dumps, frozen_order, ns_order
from app.mlmodelc.opnames import display_name
from app.mlmodelc.schema import FIXED_KEYS, FLEXIBLE_KEYS
from app.mlmodelc.survey import survey_function

# Top-level key order of each bundle's metadata.json, as Apple wrote it.
TOP_ORDERS = {
    "add_model (3402)": "metadataOutputVersion outputSchema modelParameters specificationVersion mlProgramOperationTypeHistogram computePrecision isUpdatable stateSchema availability modelType userDefinedMetadata inputSchema generatedClassName method",
    "silero-vad (3500)": "shortDescription metadataOutputVersion outputSchema version modelParameters author specificationVersion storagePrecision mlProgramOperationTypeHistogram computePrecision stateSchema isUpdatable availability modelType inputSchema userDefinedMetadata generatedClassName method",
    "flexible-multifunction (3600)": "metadataOutputVersion outputSchema modelParameters specificationVersion functions mlProgramOperationTypeHistogram isUpdatable stateSchema availability computePrecision modelType inputSchema defaultFunctionName generatedClassName userDefinedMetadata method",
    "Parakeet encoder": "metadataOutputVersion storagePrecision outputSchema modelParameters specificationVersion mlProgramOperationTypeHistogram computePrecision isUpdatable stateSchema availability modelType userDefinedMetadata inputSchema generatedClassName method",
    "Parakeet preprocessor": "metadataOutputVersion shortDescription outputSchema storagePrecision modelParameters author specificationVersion mlProgramOperationTypeHistogram computePrecision isUpdatable stateSchema availability modelType inputSchema userDefinedMetadata generatedClassName method",
    "TransposeEncoder (3404)": "shortDescription metadataOutputVersion outputSchema version modelParameters author specificationVersion mlProgramOperationTypeHistogram computePrecision stateSchema isUpdatable availability modelType inputSchema userDefinedMetadata generatedClassName method",
    "Argmax (3404)": "metadataOutputVersion shortDescription outputSchema modelParameters author specificationVersion mlProgramOperationTypeHistogram computePrecision isUpdatable stateSchema availability modelType inputSchema userDefinedMetadata generatedClassName method",
}


@pytest.mark.parametrize("bundle", sorted(TOP_ORDERS))
def test_top_level_key_order(bundle):
    apple = TOP_ORDERS[bundle].split()
    assert ns_order([k for k in TOP_KEYS if k in apple]) == apple


def test_nested_dictionary_orders():
    assert ns_order(FIXED_KEYS) == [
        "hasShapeFlexibility",
        "isOptional",
        "dataType",
        "formattedType",
        "shortDescription",
        "shape",
        "name",
        "type",
    ]
    assert ns_order(FLEXIBLE_KEYS) == [
        "dataType",
        "hasShapeFlexibility",
        "isOptional",
        "shapeFlexibility",
        "shapeRange",
        "formattedType",
        "type",
        "shape",
        "name",
        "shortDescription",
    ]
    assert ns_order(FUNCTION_KEYS) == [
        "computePrecision",
        "outputSchema",
        "stateSchema",
        "name",
        "mlProgramOperationTypeHistogram",
        "inputSchema",
    ]
    assert ns_order(PLATFORMS) == ["macOS", "tvOS", "visionOS", "watchOS", "iOS", "macCatalyst"]


def test_user_defined_metadata_is_a_frozen_dictionary():
    """Three keys whose hashes collide in a 3-slot table: the four orders Apple wrote for them
    (add_model and three Parakeet bundles) are all orders a full 3-slot table can hold, and
    none a growing table could (it would have 7 slots and no collision)."""
    keys = [f"com.github.apple.coremltools.{k}" for k in ("source", "source_dialect", "version")]
    seen = [
        ("source_dialect", "source", "version"),
        ("version", "source", "source_dialect"),
        ("source_dialect", "version", "source"),
    ]
    frozen = {
        tuple(k.rsplit(".", 1)[1] for k in frozen_order(p)) for p in itertools.permutations(keys)
    }
    grown = {tuple(k.rsplit(".", 1)[1] for k in ns_order(p)) for p in itertools.permutations(keys)}
    assert set(seen) <= frozen
    assert not set(seen) & grown
    text = dumps(FrozenDict((k, "x") for k in keys))
    assert text.index("source_dialect") < text.index('.source"')


@pytest.mark.parametrize(
    ("op", "opset", "name"),
    [
        ("lstm", "CoreML5", "Lstm"),
        ("slice_by_index", "CoreML5", "SliceByIndex"),
        ("slice_by_index", "CoreML6", "SliceByIndex"),
        ("slice_by_index", "CoreML7", "Ios17.sliceByIndex"),
        ("cast", "CoreML6", "Ios16.cast"),
        ("constexpr_affine_dequantize", "CoreML6", "Ios16.constexprAffineDequantize"),
        ("constexpr_affine_dequantize", "CoreML7", "Ios16.constexprAffineDequantize"),
        ("softmax", "CoreML7", "Ios16.softmax"),
        ("relu", "CoreML7", "Ios16.relu"),
        ("relu", "CoreML8", "Ios18.relu"),
        ("pad", "CoreML7", "Pad"),
        ("range_1d", "CoreML7", "Range1d"),
        ("upsample_nearest_neighbor", "CoreML7", "UpsampleNearestNeighbor"),
        ("reduce_argmax", "CoreML6", "Ios16.reduceArgmax"),
        ("gather_along_axis", "CoreML7", "Ios17.gatherAlongAxis"),
        ("floor_div", "CoreML7", "Ios17.floorDiv"),
    ],
)
def test_op_display_names(op, opset, name):
    assert display_name(op, opset) == name


# For each 3520/3600 text: Apple's histogram keys in order, computePrecision, storagePrecision.
NEWER = {
    "coremlc-3520.5.1-flexible-gather": (
        "Ios17.gather Ios17.cast Ios17.less Ios17.mul Ios17.maximum Ios17.add Ios17.minimum",
        "Mixed (Float32, Int32)",
        None,
    ),
    "coremlc-3600.25.1-flexible-multifunction": ("Ios18.relu", "Float32", None),
    "coremlc-3600.25.1-fp16-subnormal-cast": (
        "Ios17.add Ios17.cast",
        "Mixed (Float16, Float32)",
        None,
    ),
    "coremlc-3600.25.1-quantized-constexpr": (
        "Ios17.add Ios16.constexprAffineDequantize",
        "Float32",
        "Int8",
    ),
}


@pytest.mark.parametrize("stem", sorted(NEWER))
def test_histogram_and_precisions_of_newer_texts(stem):
    keys, compute, storage = NEWER[stem]
    program = parse_program((GOLDENS / "apple-mil-text" / f"{stem}.mil").read_text()).program
    for name, fn in program.functions.items():
        survey = survey_function(name, fn)
        assert ns_order(survey.histogram) == keys.split()
        assert survey.compute_precision == compute
        assert survey.storage_precision == storage


def test_json_layout():
    assert dumps([{"a": []}]) == '[\n  {\n    "a" : [\n\n    ]\n  }\n]'
    assert dumps({"b": {}}) == '{\n  "b" : {\n\n  }\n}'
    assert dumps({"c/d": ["x\ny", 7]}) == '{\n  "c\\/d" : [\n    "x\\ny",\n    7\n  ]\n}'


def test_generated_class_name():
    assert class_name("silero-vad-unified-v6.0.0") == "silero_vad_unified_v6_0_0"
    assert class_name("add_model") == "add_model"
    assert class_name("3d") == "_3d"
