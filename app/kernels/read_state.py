"""read_state: read an iOS18 state buffer (a KV cache's building block).

On the private ANE-direct path state programs are known to compile but not to evaluate on
macOS 26.x, hence the catalog's "experimental" caveat.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field, model_validator

from app.core.names import Identifier
from app.kernels.common import FP16, f64
from app.kernels.op import Arrays, CatalogOp
from app.kernels.params import Dim, OpParams
from app.kernels.space import Draw
from app.mil import Builder

STATE_CAVEAT = (
    "state programs compile for Core ML; on the ANE-direct path evaluation is experimental"
)


class ReadStateParams(OpParams):
    """Read a state buffer (iOS18 state; experimental on the ANE-direct path)."""

    state_name: Identifier = "state"
    shape: list[Dim] = Field(min_length=1, max_length=4)

    @model_validator(mode="after")
    def _not_reserved(self) -> ReadStateParams:
        if self.state_name in ("x", "y", "value"):
            raise ValueError(
                f"state_name {self.state_name!r} is reserved for the kernel's inputs/outputs"
            )
        return self


def build(b: Builder, p: ReadStateParams, w: dict[str, np.ndarray]):
    state = b.state(p.state_name, FP16, p.shape)
    return [b.op("read_state", "y", input=state)]


def definition(p: ReadStateParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """y is the buffer; the buffer is unchanged."""
    buffer = f64(states[p.state_name])
    return {"y": buffer}, {p.state_name: buffer}


def param_space(d: Draw) -> dict[str, Any]:
    return {"shape": [d.dim(16) for _ in range(d.integer(1, 4))]}


OP = CatalogOp(
    name="read_state",
    summary="read a state buffer (ios18)",
    params=ReadStateParams,
    build=build,
    definition=definition,
    tolerance=0.0,  # data movement: bit-exact
    examples=(
        {"state_name": "kv", "shape": [1, 1, 4, 8]},
        {"shape": [8]},
    ),
    param_space=param_space,
    inputs={"<state_name>": "state<[shape]> fp16"},
    outputs={"y": "[shape] fp16"},
    experimental=STATE_CAVEAT,
)
