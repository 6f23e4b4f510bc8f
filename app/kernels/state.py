"""read_state / update_state: iOS18 state buffers (a KV cache's building blocks).

update_state writes then reads (`write_state` + `read_state`, the form coremltools lowers
coreml_update_state to). On the private ANE-direct path these programs are known to compile but
not to evaluate on macOS 26.x, hence "experimental".
"""

from __future__ import annotations

import numpy as np

from app.kernels.common import FP16
from app.kernels.spec import Kernel
from app.mil import Builder
from app.schemas import ReadStateParams, UpdateStateParams

CAVEAT = "state programs compile for Core ML; on the ANE-direct path evaluation is experimental"


def build_read(b: Builder, p: ReadStateParams, w: dict[str, np.ndarray]):
    state = b.state(p.state_name, FP16, p.shape)
    return [b.op("read_state", "y", input=state)]


def build_update(b: Builder, p: UpdateStateParams, w: dict[str, np.ndarray]):
    state = b.state(p.state_name, FP16, p.shape)
    value = b.input("value", FP16, p.shape)
    b.op("write_state", f"{p.state_name}_write_state", input=state, data=value)
    return [b.op("read_state", "y", input=state)]


READ = Kernel(
    name="read_state",
    summary="read a state buffer (ios18)",
    params=ReadStateParams,
    build=build_read,
    inputs={"<state_name>": "state<[shape]> fp16"},
    outputs={"y": "[shape] fp16"},
    experimental=CAVEAT,
)
UPDATE = Kernel(
    name="update_state",
    summary="write `value` into a state buffer and read it back (ios18)",
    params=UpdateStateParams,
    build=build_update,
    inputs={"<state_name>": "state<[shape]> fp16", "value": "[shape] fp16"},
    outputs={"y": "[shape] fp16"},
    experimental=CAVEAT,
)
