"""The planner: a checkpoint's config.json and a device -> how its layers and head group into
programs, predicted prefill and decode speed, memory, first-load size, and what does not fit.

    from app.planner import make_plan
    make_plan(config, "m4", quantize={"mode": "palettize", "nbits": 4}).to_json()
"""

from app.planner.plan import DEFAULT_CONTEXT, DEFAULT_PREFILL, Plan, Problem, make_plan
from app.planner.shape import precision_of, shape_from_config

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_PREFILL",
    "Plan",
    "Problem",
    "make_plan",
    "precision_of",
    "shape_from_config",
]
