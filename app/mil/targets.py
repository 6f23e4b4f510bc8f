"""Deployment targets: the single table mapping a target name to its spec version, opset and spelling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.mil.types import DType

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
    name: str  # as written in model.mil: func main<ios18>
    spec_version: int  # Model.specificationVersion
    opset: str  # MIL.proto function opset / block_specializations key
    program_version: str  # model.mil header: program(1.3)
    bare_scalars: bool  # iOS18 spells scalars `int32(1)`; earlier targets `tensor<int32, []>(1)`
    platform_version: str  # iOS deployment version, for the compiler's --deployment-target
    order: int  # release order: an op available since target T is in every later one
    supports_state: bool  # state<tensor<...>> parameters (read_state / write_state)
    blob_dtypes: frozenset[DType]  # const dtypes stored in weight.bin

    def __str__(self) -> str:
        return self.name

    def includes(self, since: str) -> bool:
        """Whether this target's opset has what target `since` introduced."""
        return self.order >= TARGETS[since].order


TARGETS: dict[str, Target] = {
    "ios17": Target("ios17", 8, "CoreML7", "1.0", False, "17.0", 17, False, _BLOB_DTYPES),
    "ios18": Target("ios18", 9, "CoreML8", "1.3", True, "18.0", 18, True, _BLOB_DTYPES_IOS18),
}
DEFAULT_TARGET = "ios18"
# For pydantic models and type hints; checked against the table so the two cannot drift.
TargetName = Literal["ios18", "ios17"]
assert set(TargetName.__args__) == set(TARGETS)  # type: ignore[attr-defined]


def get_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    try:
        return TARGETS[target]
    except KeyError:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}") from None
