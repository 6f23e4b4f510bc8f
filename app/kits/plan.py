"""How a kit is cut into programs: runs of consecutive decoder layers within the per-program
weight budget, and the head's vocabulary in pieces within the per-axis limit and the budget.

The layer grouping is the planner's rule (app.devices.llm.layer_groups: as many whole layers as
the budget holds, evened out), so a kit built for a device has the programs `ane-kernels plan`
predicts for it. With no device the budget is ANE_MAX_PROGRAM_WEIGHT_BYTES and the per-axis
limit 16,384 (the largest dimension the ANE is reported to compile on every chip); with one,
both come from the device table (the axis capped by the ops' own 16,384 parameter limit), and
the planner's prediction for that device is recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.devices import AXIS_MAX_EVERY_CHIP
from app.devices.llm import layer_groups
from app.errors import RequestError
from app.kernels.params import MAX_DIM

DEFAULT_AXIS_LIMIT = AXIS_MAX_EVERY_CHIP


def axis_limit_for(device_axis_max: int) -> int:
    """A head piece's rows on a device: its per-axis limit, but never past the ops' own
    parameter limit (MAX_DIM, a public contract of every op), so a chip that compiles 65,536
    rows still gets pieces of at most 16,384."""
    return min(device_axis_max, MAX_DIM)


@dataclass(frozen=True)
class Plan:
    layers: list[range]  # each decoder program's layers, in run order
    head: list[range]  # each head piece's vocabulary rows [start, stop)
    budget: int
    axis_limit: int
    device: str | None = None
    device_axis_max: int | None = None
    prediction: Mapping[str, Any] | None = field(default=None)  # the planner's, for the device

    def to_json(self) -> dict:
        return {
            "method": "consecutive layers per program within the weight budget, evened out "
            "(the planner's grouping); the vocabulary in equal pieces within the per-axis limit "
            "and the budget",
            "device": self.device,
            "max_program_weight_bytes": self.budget,
            "axis_limit": self.axis_limit,
            **({"device_axis_max": self.device_axis_max} if self.device is not None else {}),
            "decoder_programs": [[r.start, r.stop - 1] for r in self.layers],
            "head_pieces": [[r.start, r.stop] for r in self.head],
            **({"prediction": dict(self.prediction)} if self.prediction is not None else {}),
        }


def group_layers(num_layers: int, layer_bytes: int, budget: int) -> list[range]:
    """Consecutive layers per program by the planner's rule; refused when one layer alone is
    over the budget (no cut at layer boundaries meets it)."""
    if layer_bytes > budget:
        raise RequestError(
            "max_program_weight_bytes",
            f"one decoder layer holds {layer_bytes} "
            f"bytes of weights, over the budget of {budget} bytes per program: "
            "no cut at layer boundaries meets it; raise the budget or quantize",
            title="Program too large",
            limit=budget,
        )
    out, first = [], 0
    for count in layer_groups(num_layers, layer_bytes, budget):
        out.append(range(first, first + count))
        first += count
    return out


def split_vocabulary(vocab: int, hidden: int, budget: int, axis_limit: int) -> list[range]:
    """Equal pieces of the vocabulary, each within the axis limit and (fp16 rows of `hidden`)
    the weight budget."""
    rows = min(axis_limit, budget // (2 * hidden))
    if rows < 1:
        raise RequestError(
            "max_program_weight_bytes",
            f"one head row holds {2 * hidden} bytes, over the budget of {budget} bytes per program",
            limit=budget,
            title="Program too large",
        )
    pieces = math.ceil(vocab / rows)
    size = math.ceil(vocab / pieces)
    return [range(s, min(s + size, vocab)) for s in range(0, vocab, size)]


def make_plan(
    num_layers: int,
    layer_bytes: int,
    vocab: int,
    hidden: int,
    budget: int,
    device: str | None = None,
    device_axis_max: int | None = None,
    prediction: Mapping[str, Any] | None = None,
) -> Plan:
    axis = DEFAULT_AXIS_LIMIT if device_axis_max is None else axis_limit_for(device_axis_max)
    return Plan(
        group_layers(num_layers, layer_bytes, budget),
        split_vocabulary(vocab, hidden, budget, axis),
        budget,
        axis,
        device,
        device_axis_max,
        prediction,
    )
