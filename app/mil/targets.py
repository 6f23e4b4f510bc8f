"""Deployment targets: the single table mapping a target name to its spec version, opset and spelling."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str  # as written in model.mil: func main<ios18>
    spec_version: int  # Model.specificationVersion
    opset: str  # MIL.proto function opset / block_specializations key
    program_version: str  # model.mil header: program(1.3)
    bare_scalars: bool  # iOS18 spells scalars `int32(1)`; earlier targets `tensor<int32, []>(1)`
    platform_version: str  # iOS deployment version, for the compiler's --deployment-target
    order: int  # for "available since" comparisons

    def __str__(self) -> str:
        return self.name


TARGETS: dict[str, Target] = {
    "ios17": Target("ios17", 8, "CoreML7", "1.0", False, "17.0", 17),
    "ios18": Target("ios18", 9, "CoreML8", "1.3", True, "18.0", 18),
}
DEFAULT_TARGET = "ios18"


def get_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    try:
        return TARGETS[target]
    except KeyError:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}") from None
