"""The planner: a checkpoint's config.json and a device -> how its layers and head group into
programs (the layout `ane-kernels model` builds: app/planner/layout.py), predicted prefill and
decode speed, memory, first-load size, what does not fit and what is not honest to promise.

    from app.planner import make_plan
    make_plan(config, "m4", quantize={"mode": "palettize", "nbits": 4}).to_json()
"""

from app.planner.layout import Layout, lay_out
from app.planner.plan import (
    DEFAULT_CONTEXT,
    DEFAULT_PREFILL,
    DEFAULT_PROMPT,
    STRICT_RULES,
    Plan,
    Problem,
    make_plan,
)
from app.planner.shape import precision_of, shape_from_config

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_PREFILL",
    "DEFAULT_PROMPT",
    "STRICT_RULES",
    "Layout",
    "Plan",
    "Problem",
    "lay_out",
    "make_plan",
    "precision_of",
    "shape_from_config",
]
