"""Op names in metadata.json's `mlProgramOperationTypeHistogram`, as Apple displays them.

Apple names the version of an op its MIL registry resolves for the function's opset: the iOS15
base version as UpperCamelCase (`SliceByIndex`, `Range1d`), a later one as `IosNN.` plus
lowerCamelCase (`Ios16.constexprAffineDequantize`). Which versions its registry holds cannot be
read off coremltools (which has, e.g., no iOS16 `sub` or `softmax`, while Apple prints
`Ios16.sub` and `Ios16.softmax`), so `OBSERVED` lists, op by op and per program opset, the
version an Apple-compiled bundle showed, and which bundle that was.

A name not in the table is chosen by rule from what the table holds for the op (`name_of`), and
said to be unobserved: the compile log lists every such name (`OpName.observed`). The rule: an
op missing from the table takes a version at the function's own opset (most ops seen in iOS16
and iOS17 programs have one); in an iOS18-or-later program, a version at that opset unless the
op was seen only as its base version (`Ios18.relu` is the one iOS18 sample, and relu has no
iOS17 version: iOS18 re-versioned even ops iOS17 skipped); otherwise the latest version seen at
or below the program's opset. An iOS15 program has nothing but base versions: those names are
certain, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.language.targets import BY_OPSET

# Where a name was seen. The goldens are ../shared/goldens (tests/fixtures/goldens holds the same
# silero-vad, add_model and apple-mil-text bundles); the rest were read off published bundles.
SILERO_INT8 = "goldens silero-vad/unified_int8 (coremlc 3500.32.1)"
SILERO_PALETTE = "goldens silero-vad/unified_palette_4bit (coremlc 3500.32.1)"
SILERO_PRUNED = "goldens silero-vad/unified_pruned_int8 (coremlc 3500.32.1)"
ADD_MODEL = "goldens coremltools-add_model (coremlc 3402.4.1)"
PARAKEET_ENCODER = "goldens ios17-text/ParakeetEOU-160ms-streaming_encoder (coremlc 3500.32.1)"
PARAKEET_PREPROCESSOR = "goldens ios17-text/ParakeetEOU-parakeet_eou_preprocessor"
PARAKEET_DECODER = "goldens ios17-text/ParakeetEOU-decoder"
PARAKEET_JOINT = "goldens ios17-text/ParakeetEOU-joint_decision"
GATHER_3520 = "goldens apple-mil-text/coremlc-3520.5.1-flexible-gather (its metadata.json)"
MULTIFUNCTION_3600 = "goldens apple-mil-text/coremlc-3600.25.1-flexible-multifunction"
QUANTIZED_3600 = "goldens apple-mil-text/coremlc-3600.25.1-quantized-constexpr"
# Bundles read when the table was first written and not kept: FluidInference/FluidAudio
# (Parakeet, Argmax, TokenDurationPrediction, TransposeEncoder) and FluidInference/mobius
# (KokoroNoise) metadata.json files, and the `Ios16.einsum` key Stable Diffusion apps read.
PUBLISHED = "published FluidAudio/mobius bundles (not in the goldens)"
# Issue 25: an Apple-compiled iOS16 bundle's histogram held `Ios16.sub` where the rule said `Sub`.
ISSUE_25 = "issue 25: an Apple-compiled iOS16 bundle (Ios16.sub; Ios16.softmax likewise)"

_16, _17, _18 = 16, 17, 18
BASE = 15

# op -> {program opset (iOS version): (the op version Apple showed, the bundle it was seen in)}
OBSERVED: dict[str, dict[int, tuple[int, str]]] = {
    "add": {_16: (_16, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "cast": {_16: (_16, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "clip": {_16: (_16, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "conv": {_16: (_16, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "lstm": {_16: (_16, SILERO_INT8), _17: (_17, PARAKEET_DECODER)},
    "mul": {_16: (_16, ADD_MODEL), _17: (_17, PARAKEET_ENCODER)},
    "pow": {_16: (_16, SILERO_INT8), _17: (_17, PARAKEET_PREPROCESSOR)},
    "sqrt": {_16: (_16, SILERO_INT8), _17: (_17, PUBLISHED)},
    "reduce_argmax": {_16: (_16, PUBLISHED), _17: (_17, PARAKEET_JOINT)},
    "sub": {_16: (_16, ISSUE_25), _17: (_17, PARAKEET_ENCODER)},
    "relu": {_16: (_16, SILERO_INT8), _17: (_16, PARAKEET_ENCODER), _18: (_18, MULTIFUNCTION_3600)},
    "sigmoid": {_16: (_16, SILERO_INT8), _17: (_16, PARAKEET_ENCODER)},
    "softmax": {_16: (_16, ISSUE_25), _17: (_16, PARAKEET_ENCODER)},
    "silu": {_17: (_16, PARAKEET_ENCODER)},
    "reduce_sum": {_17: (_16, PARAKEET_PREPROCESSOR)},
    "reduce_max": {_17: (_16, PUBLISHED)},
    "cumsum": {_17: (_16, PUBLISHED)},
    "avg_pool": {_17: (_16, PUBLISHED)},
    "fill_like": {_17: (_16, PUBLISHED)},
    "upsample_bilinear": {_17: (_16, PUBLISHED)},
    "einsum": {_16: (_16, PUBLISHED)},
    "constexpr_affine_dequantize": {_16: (_16, SILERO_INT8), _17: (_16, QUANTIZED_3600)},
    "constexpr_lut_to_dense": {_16: (_16, SILERO_PALETTE)},
    "constexpr_sparse_to_dense": {_16: (_16, SILERO_PRUNED)},
    "transpose": {_16: (BASE, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "squeeze": {_16: (BASE, SILERO_INT8), _17: (_17, PARAKEET_DECODER)},
    "expand_dims": {_16: (BASE, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "slice_by_index": {_16: (BASE, SILERO_INT8), _17: (_17, PARAKEET_ENCODER)},
    "abs": {_17: (_17, PUBLISHED)},
    "atan": {_17: (_17, PUBLISHED)},
    "concat": {_17: (_17, PARAKEET_ENCODER)},
    "equal": {_17: (_17, PUBLISHED)},
    "floor": {_17: (_17, PARAKEET_ENCODER)},
    "floor_div": {_17: (_17, PARAKEET_PREPROCESSOR)},
    "gather": {_17: (_17, PARAKEET_DECODER)},
    "gather_along_axis": {_17: (_17, PARAKEET_JOINT)},
    "greater": {_17: (_17, PUBLISHED)},
    "greater_equal": {_17: (_17, PARAKEET_ENCODER)},
    "instance_norm": {_17: (_17, PUBLISHED)},
    "layer_norm": {_17: (_17, PARAKEET_ENCODER)},
    "less": {_17: (_17, PARAKEET_ENCODER)},
    "linear": {_17: (_17, PARAKEET_ENCODER)},
    "log": {_17: (_17, PARAKEET_PREPROCESSOR)},
    "logical_and": {_17: (_17, PARAKEET_ENCODER)},
    "logical_not": {_17: (_17, PARAKEET_ENCODER)},
    "matmul": {_17: (_17, PARAKEET_ENCODER)},
    "maximum": {_17: (_17, GATHER_3520)},
    "minimum": {_17: (_17, GATHER_3520)},
    "real_div": {_17: (_17, PUBLISHED)},
    "reshape": {_17: (_17, PARAKEET_ENCODER)},
    "sin": {_17: (_17, PUBLISHED)},
    "tanh": {_17: (_17, PUBLISHED)},
    "topk": {_17: (_17, PARAKEET_JOINT)},
    "pad": {_16: (BASE, SILERO_INT8), _17: (BASE, PARAKEET_ENCODER)},
    "split": {_17: (BASE, PARAKEET_ENCODER)},
    "select": {_17: (BASE, PARAKEET_ENCODER)},
    "tile": {_17: (BASE, PARAKEET_ENCODER)},
    "stack": {_17: (BASE, PARAKEET_ENCODER)},
    "range_1d": {_17: (BASE, PARAKEET_PREPROCESSOR)},
    "identity": {_17: (BASE, PARAKEET_PREPROCESSOR)},
    "shape": {_17: (BASE, PARAKEET_PREPROCESSOR)},
    "upsample_nearest_neighbor": {_17: (BASE, PUBLISHED)},
}


@dataclass(frozen=True)
class OpName:
    name: str  # as the histogram spells it
    observed: bool  # False: chosen by rule, never seen in an Apple bundle for this opset
    source: str | None = None  # the bundle it was seen in


def _camel(op: str, upper: bool) -> str:
    parts = op.split("_")
    head = parts[0][:1].upper() + parts[0][1:] if upper else parts[0]
    return head + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _spelled(op: str, version: int) -> str:
    return _camel(op, upper=True) if version <= BASE else f"Ios{version}.{_camel(op, upper=False)}"


def _by_rule(op: str, level: int) -> int:
    """The version the rule of the module docstring picks for an op not seen at `level`."""
    seen = OBSERVED.get(op)
    if seen is None:
        return level
    versions = {v for v, _ in seen.values() if v > BASE}
    if level >= _18 and versions:
        return level
    below = [v for v in versions if v <= level]
    return max(below) if below else BASE


def name_of(op: str, opset: str) -> OpName:
    """Apple's histogram name for `op` in a function of `opset`, and whether it was seen."""
    target = BY_OPSET.get(opset)
    level = target.order if target is not None else BASE
    if level <= BASE:
        return OpName(_camel(op, upper=True), True, "iOS15 programs hold base versions only")
    seen = OBSERVED.get(op, {}).get(level)
    if seen is not None:
        return OpName(_spelled(op, seen[0]), True, seen[1])
    return OpName(_spelled(op, _by_rule(op, level)), False)


def display_name(op: str, opset: str) -> str:
    return name_of(op, opset).name
