"""update_state: write `value` into an iOS18 state buffer, then read it back.

Written as `write_state` + `read_state`, the form coremltools lowers coreml_update_state to.
"""

from __future__ import annotations

import numpy as np

from app.kernels.common import FP16, f64
from app.kernels.op import Arrays, CatalogOp
from app.kernels.read_state import STATE_CAVEAT, ReadStateParams, param_space
from app.mil import Builder


class UpdateStateParams(ReadStateParams):
    """Write `value` into a state buffer, then read it back (write_state + read_state)."""


def build(b: Builder, p: UpdateStateParams, w: dict[str, np.ndarray]):
    state = b.state(p.state_name, FP16, p.shape)
    value = b.input("value", FP16, p.shape)
    b.op_outputs("write_state", f"{p.state_name}_write_state", input=state, data=value)
    return [b.op("read_state", "y", input=state)]


def definition(p: UpdateStateParams, inputs: Arrays, weights: Arrays, states: Arrays):
    """The buffer becomes `value`; y reads it back."""
    value = f64(inputs["value"])
    return {"y": value}, {p.state_name: value}


OP = CatalogOp(
    name="update_state",
    summary="write `value` into a state buffer and read it back (ios18)",
    params=UpdateStateParams,
    build=build,
    definition=definition,
    tolerance=0.0,  # data movement: bit-exact
    examples=(
        {"state_name": "kv", "shape": [1, 1, 4, 8]},
        {"state_name": "cache", "shape": [2, 3]},
    ),
    param_space=param_space,
    inputs={"<state_name>": "state<[shape]> fp16", "value": "[shape] fp16"},
    outputs={"y": "[shape] fp16"},
    experimental=STATE_CAVEAT,
)
