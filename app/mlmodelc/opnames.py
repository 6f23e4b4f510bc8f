"""Op names in metadata.json's `mlProgramOperationTypeHistogram`, as Apple displays them.

Apple names the version of an op its MIL registry resolves for the function's opset: the iOS15
base version as UpperCamelCase (`SliceByIndex`, `Range1d`), a later one as `IosNN.` plus
lowerCamelCase (`Ios16.constexprAffineDequantize`). In an iOS17 program an op without an iOS17
version shows its iOS16 one (`Ios16.softmax`) or its base one (`Pad`).

`VERSIONS` lists, per op, the opsets above iOS15 where a version was seen, read off every
Apple-compiled metadata.json available (the five goldens, ten more published bundles: FluidAudio
Parakeet/Argmax/TokenDurationPrediction/TransposeEncoder, mobius KokoroNoise, mlmodelc-export
fixtures, and the `Ios16.einsum` key Stable Diffusion apps read). An empty tuple means only the
base version was seen where a later one could have shown. What was not seen, and is chosen here:

- an op missing from the table: a version at the function's own opset (most ops seen in iOS16
  and iOS17 programs have one);
- an iOS18-or-later program: a version at that opset unless the op is known base-only
  (`Ios18.relu` is the one iOS18 sample, and relu has no iOS17 version: iOS18 re-versioned
  even ops iOS17 skipped).
"""

from __future__ import annotations

from app.language.targets import BY_OPSET

_16, _17, _18 = 16, 17, 18

VERSIONS: dict[str, tuple[int, ...]] = {
    # seen as Ios16 in iOS16 programs and Ios17 in iOS17 programs
    "add": (_16, _17),
    "cast": (_16, _17),
    "clip": (_16, _17),
    "conv": (_16, _17),
    "lstm": (_16, _17),
    "mul": (_16, _17),
    "pow": (_16, _17),
    "sqrt": (_16, _17),
    "reduce_argmax": (_16, _17),
    # Ios16 only (seen as Ios16 in iOS17 programs); relu also as Ios18
    "relu": (_16, _18),
    "sigmoid": (_16,),
    "silu": (_16,),
    "softmax": (_16,),
    "reduce_sum": (_16,),
    "reduce_max": (_16,),
    "cumsum": (_16,),
    "avg_pool": (_16,),
    "fill_like": (_16,),
    "upsample_bilinear": (_16,),
    "einsum": (_16,),
    "constexpr_affine_dequantize": (_16,),
    "constexpr_lut_to_dense": (_16,),
    "constexpr_sparse_to_dense": (_16,),
    # base in iOS16 programs, Ios17 in iOS17 programs
    "transpose": (_17,),
    "squeeze": (_17,),
    "expand_dims": (_17,),
    "slice_by_index": (_17,),
    # Ios17 in iOS17 programs (their iOS16 spelling was not seen)
    "abs": (_17,),
    "atan": (_17,),
    "concat": (_17,),
    "equal": (_17,),
    "floor": (_17,),
    "floor_div": (_17,),
    "gather": (_17,),
    "gather_along_axis": (_17,),
    "greater": (_17,),
    "greater_equal": (_17,),
    "instance_norm": (_17,),
    "layer_norm": (_17,),
    "less": (_17,),
    "linear": (_17,),
    "log": (_17,),
    "logical_and": (_17,),
    "logical_not": (_17,),
    "matmul": (_17,),
    "maximum": (_17,),
    "minimum": (_17,),
    "real_div": (_17,),
    "reshape": (_17,),
    "sin": (_17,),
    "sub": (_17,),
    "tanh": (_17,),
    "topk": (_17,),
    # base only (seen as base in iOS16 or iOS17 programs)
    "pad": (),
    "split": (),
    "select": (),
    "tile": (),
    "stack": (),
    "range_1d": (),
    "identity": (),
    "shape": (),
    "upsample_nearest_neighbor": (),
}


def _camel(op: str, upper: bool) -> str:
    parts = op.split("_")
    head = parts[0][:1].upper() + parts[0][1:] if upper else parts[0]
    return head + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def resolved_version(op: str, opset: str) -> int:
    """The iOS version of `op` Apple's registry picks for a function of `opset` (15 = base)."""
    target = BY_OPSET.get(opset)
    level = target.order if target is not None else 15
    if level <= 15:
        return 15
    known = VERSIONS.get(op)
    if known is None:
        return level
    if level >= _18 and known:
        return level
    seen = [v for v in known if v <= level]
    return max(seen) if seen else 15


def display_name(op: str, opset: str) -> str:
    version = resolved_version(op, opset)
    if version == 15:
        return _camel(op, upper=True)
    return f"Ios{version}.{_camel(op, upper=False)}"
