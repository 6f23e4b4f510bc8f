"""The op catalog and `build_kernel`: op name + params + weights -> a checked MIL program."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from app.kernels import conv, gqa_expand, identity, matmul, rmsnorm, scale, sdpa, state
from app.kernels.spec import Kernel, KernelSpecError
from app.kernels.weights import prepare_weights, random_weights
from app.mil import IDENTIFIER, Builder, MILBuildError, Program, Target, get_target
from app.schemas import OpParams

KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        conv.KERNEL,
        matmul.KERNEL,
        identity.KERNEL,
        scale.KERNEL,
        rmsnorm.KERNEL,
        sdpa.KERNEL,
        gqa_expand.KERNEL,
        state.READ,
        state.UPDATE,
    )
}


@dataclass(frozen=True)
class KernelBuild:
    """A built kernel: everything packaging needs."""

    kernel: Kernel
    params: OpParams
    target: Target
    name: str
    program: Program
    weights: dict[str, np.ndarray]  # as the program stores them (validated, canonical shapes)


def get_kernel(op: str) -> Kernel:
    try:
        return KERNELS[op]
    except KeyError:
        raise KernelSpecError(
            "op", f"unknown op {op!r}; the catalog has {', '.join(KERNELS)}"
        ) from None


def parse_params(kernel: Kernel, params: Mapping[str, Any] | OpParams | None) -> OpParams:
    if isinstance(params, kernel.params):
        return params
    try:
        return kernel.params.model_validate(dict(params or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise KernelSpecError(f"params.{loc}" if loc else "params", err["msg"]) from None


def build_kernel(
    op: str,
    params: Mapping[str, Any] | OpParams | None,
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    target: str | Target = "ios18",
    name: str | None = None,
    random_seed: int | None = None,
) -> KernelBuild:
    """Validate a request and build its program. Missing weights are an error unless
    `random_seed` is given, which draws every missing weight reproducibly."""
    kernel = get_kernel(op)
    p = parse_params(kernel, params)
    try:
        tgt = get_target(target)
    except ValueError as exc:
        raise KernelSpecError("target", str(exc)) from None
    name = name or op
    if not IDENTIFIER.match(name) or len(name) > 64 or "@" in name:
        raise KernelSpecError("name", f"{name!r} must be an identifier of at most 64 characters")
    specs = kernel.weights(p)
    given = dict(weights or {})
    if random_seed is not None:
        missing = [s for s in specs if s.name not in given]
        given.update(random_weights(missing, random_seed))
    prepared = prepare_weights(specs, given)
    builder = Builder(tgt)
    try:
        outputs = kernel.build(builder, p, prepared)
        program = builder.build(outputs)
    except MILBuildError as exc:
        if "opset" in exc.message or "need ios" in exc.message:
            raise KernelSpecError(
                "target", f"{op} is not available for {tgt.name}: {exc}"
            ) from None
        raise KernelSpecError("params", str(exc)) from exc
    return KernelBuild(kernel, p, tgt, name, program, prepared)
