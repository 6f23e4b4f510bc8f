"""How a kit is cut into programs: runs of consecutive decoder layers within the per-program
weight budget, and the head's vocabulary in pieces within the per-axis limit and the budget.

This is the whole planner for now, kept to these two functions so a device-aware planner can
replace them: it knows the budget (ANE_MAX_PROGRAM_WEIGHT_BYTES) and the per-axis limit (16,384,
the largest dimension the ANE is reported to compile everywhere), nothing of a device's speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.errors import RequestError

DEFAULT_AXIS_LIMIT = 16384


@dataclass(frozen=True)
class Plan:
    layers: list[range]  # each decoder program's layers, in run order
    head: list[range]  # each head piece's vocabulary rows [start, stop)
    budget: int
    axis_limit: int

    def to_json(self) -> dict:
        return {
            "method": "consecutive layers greedily per program within the weight budget; the "
            "vocabulary in equal pieces within the per-axis limit and the budget",
            "max_program_weight_bytes": self.budget,
            "axis_limit": self.axis_limit,
            "decoder_programs": [[r.start, r.stop - 1] for r in self.layers],
            "head_pieces": [[r.start, r.stop] for r in self.head],
        }


def group_layers(num_layers: int, layer_bytes: int, budget: int) -> list[range]:
    """Consecutive layers, as many per program as the budget holds."""
    if layer_bytes > budget:
        raise RequestError("max_program_weight_bytes", f"one decoder layer holds {layer_bytes} "
                           f"bytes of weights, over the budget of {budget} bytes per program: "
                           "no cut at layer boundaries meets it; raise the budget or quantize",
                           title="Program too large", limit=budget)  # fmt: skip
    per = budget // layer_bytes
    return [range(s, min(s + per, num_layers)) for s in range(0, num_layers, per)]


def split_vocabulary(vocab: int, hidden: int, budget: int, axis_limit: int) -> list[range]:
    """Equal pieces of the vocabulary, each within the axis limit and (fp16 rows of `hidden`)
    the weight budget."""
    rows = min(axis_limit, budget // (2 * hidden))
    if rows < 1:
        raise RequestError("max_program_weight_bytes", f"one head row holds {2 * hidden} bytes, "
                           f"over the budget of {budget} bytes per program", limit=budget,
                           title="Program too large")  # fmt: skip
    pieces = math.ceil(vocab / rows)
    size = math.ceil(vocab / pieces)
    return [range(s, min(s + size, vocab)) for s in range(0, vocab, size)]


def make_plan(num_layers: int, layer_bytes: int, vocab: int, hidden: int, budget: int,
              axis_limit: int = DEFAULT_AXIS_LIMIT) -> Plan:  # fmt: skip
    return Plan(group_layers(num_layers, layer_bytes, budget),
                split_vocabulary(vocab, hidden, budget, axis_limit), budget, axis_limit)  # fmt: skip
