"""Op names in metadata.json's `mlProgramOperationTypeHistogram`, as Apple displays them.

Apple names the version of an op its MIL registry resolves for the function's opset: the iOS15
base version as UpperCamelCase (`SliceByIndex`, `Range1d`), a later one as `IosNN.` plus
lowerCamelCase (`Ios16.constexprAffineDequantize`). Which versions its registry holds cannot be
read off coremltools (which has, e.g., no iOS16 `sub` or `softmax`, while Apple prints
`Ios16.sub` and `Ios16.softmax`), so each op's record (app/mil/ops, `histogram`) lists, per
program opset, the version an Apple-compiled bundle showed, and which bundle that was.

A name not recorded is chosen by rule from what the record holds for the op (`name_of`), and
said to be unobserved: the compile log lists every such name (`OpName.observed`). The rule: an
op with no histogram entry takes a version at the function's own opset (most ops seen in iOS16
and iOS17 programs have one); in an iOS18-or-later program, a version at that opset unless the
op was seen only as its base version (`Ios18.relu` is the one iOS18 sample, and relu has no
iOS17 version: iOS18 re-versioned even ops iOS17 skipped); otherwise the latest version seen at
or below the program's opset. An iOS15 program has nothing but base versions: those names are
certain, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.language.targets import BY_OPSET
from app.mil import ops
from app.mil.ops import Seen
from app.mil.ops.sources import BASE, IOS18


def observed(op: str) -> dict[int, Seen]:
    """Program opset (iOS version) -> the op version Apple showed there, and the bundle."""
    record = ops.get(op)
    return dict(record.histogram) if record is not None else {}


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
    seen = observed(op)
    if not seen:
        return level
    versions = {v for v, _ in seen.values() if v > BASE}
    if level >= IOS18 and versions:
        return level
    below = [v for v in versions if v <= level]
    return max(below) if below else BASE


def name_of(op: str, opset: str) -> OpName:
    """Apple's histogram name for `op` in a function of `opset`, and whether it was seen."""
    target = BY_OPSET.get(opset)
    level = target.order if target is not None else BASE
    if level <= BASE:
        return OpName(_camel(op, upper=True), True, "iOS15 programs hold base versions only")
    seen = observed(op).get(level)
    if seen is not None:
        return OpName(_spelled(op, seen[0]), True, seen[1])
    return OpName(_spelled(op, _by_rule(op, level)), False)


def display_name(op: str, opset: str) -> str:
    return name_of(op, opset).name
