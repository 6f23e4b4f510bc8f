"""Deployment targets: the one table of every opset, its specification version, spelling and
capabilities. A capability is asked by name (`target.supports_state`), never by release number."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from app.language.dtypes import DType

# Consts that live in weight.bin rather than inline (coremltools' should_use_weight_file):
# the dtypes the blob format stores for a target, at least this many elements.
BLOB_MIN_SIZE = 10
# Sub-byte values are int8/uint8 arrays in coremltools, so they qualify on every target (and
# are written packed).
_BLOB_DTYPES = frozenset({DType.FP16, DType.FP32, DType.UINT8, DType.INT8}) | {
    d for d in DType if d.is_subbyte
}
_BLOB_DTYPES_IOS18 = _BLOB_DTYPES | {DType.INT16, DType.UINT16, DType.INT32, DType.UINT32}


@dataclass(frozen=True)
class Target:
    """A deployment target: an opset and everything that follows from it."""

    name: str  # as written in model.mil: func main<ios18>
    opset: str  # MIL.proto function opset / block_specializations key
    spec_version: int  # Model.specificationVersion
    program_version: str  # model.mil header: program(1.3)
    platform_version: str  # iOS deployment version, for the compiler's --deployment-target
    order: int  # release order: an op available since target T is in every later one
    buildable: bool  # this service builds programs for it (the others are only read and printed)
    supports_state: bool  # state<tensor<...>> parameters (read_state / write_state)
    multifunction: bool  # several functions in one package (ModelDescription.functions)
    ios18_compression: bool  # constexpr_lut_to_dense / _blockwise_shift_scale / chained forms
    blob_dtypes: frozenset[DType]  # const dtypes stored in weight.bin

    @property
    def bare_scalars(self) -> bool:
        """program(1.3) spells scalars `int32(1)`; program(1.0) `tensor<int32, []>(1)`."""
        return self.program_version == "1.3"

    def __str__(self) -> str:
        return self.name

    def includes(self, since: str) -> bool:
        """Whether this target's opset has what target `since` introduced."""
        return self.order >= ALL_TARGETS[since].order


def _target(
    name: str, opset: str, spec: int, program: str, order: int, *, buildable: bool, ios18: bool
) -> Target:
    return Target(
        name,
        opset,
        spec,
        program,
        f"{order}.0",
        order,
        buildable,
        supports_state=ios18,
        multifunction=ios18,
        ios18_compression=ios18,
        blob_dtypes=_BLOB_DTYPES_IOS18 if ios18 else _BLOB_DTYPES,
    )


# Every opset Apple's compilers write (coremltools `_OPSET`; goldens: CoreML5 -> ios15 ...
# CoreML8 -> ios18; ios26 appears in no golden). The program version follows the specification
# version: every golden of spec 9 is program(1.3), every one of 6-8 program(1.0); spec 10 is
# taken to be 1.3 as well (unseen).
ALL_TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        _target("ios15", "CoreML5", 6, "1.0", 15, buildable=False, ios18=False),
        _target("ios16", "CoreML6", 7, "1.0", 16, buildable=False, ios18=False),
        _target("ios17", "CoreML7", 8, "1.0", 17, buildable=True, ios18=False),
        _target("ios18", "CoreML8", 9, "1.3", 18, buildable=True, ios18=True),
        _target("ios26", "CoreML9", 10, "1.3", 26, buildable=False, ios18=True),
    )
}
# The targets programs are built for.
TARGETS: dict[str, Target] = {n: t for n, t in ALL_TARGETS.items() if t.buildable}
DEFAULT_TARGET: TargetName = "ios18"
# For pydantic models and type hints; checked against the table so the two cannot drift.
TargetName = Literal["ios18", "ios17"]
assert set(get_args(TargetName)) == set(TARGETS)
BY_OPSET = {t.opset: t for t in ALL_TARGETS.values()}


def get_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    try:
        return TARGETS[target]
    except KeyError:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}") from None
