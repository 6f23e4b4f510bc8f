"""State: reading and writing a function's mutable buffers (iOS18 `state<tensor<...>>`,
coremltools iOS18 `states.py`). Never graph nodes: a graph has no states."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops.record import Arg, Family, Form, OpRecord
from app.mil.types import FLOATS, TensorType

F = Family.STATE


def _read_state_type(call: Call) -> list[TensorType]:
    return [call.type("input")]


def _write_state_type(call: Call) -> list[TensorType]:
    if call.type("data") != call.type("input"):
        raise call.fail(
            "data", f"{call.type('data')} does not match the state {call.type('input')}"
        )
    return []


def _read_state(a: Args) -> np.ndarray:
    return a.states[a.state_name("input")].copy()


def _write_state(a: Args) -> None:
    a.states[a.state_name("input")] = np.array(a["data"])


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "read_state",
        F,
        Form({"input": Arg(FLOATS, state=True)}, _read_state_type),
        since="ios18",
        meaning=_read_state,
    ),
    OpRecord(
        "write_state",
        F,
        Form({"input": Arg(FLOATS, state=True), "data": Arg(FLOATS)}, _write_state_type),
        since="ios18",
        meaning=_write_state,
    ),
)
