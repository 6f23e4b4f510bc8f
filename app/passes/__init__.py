"""Graph passes over the MIL IR: the seed's catalogue (coremltools' MIL graph passes), each a
rewrite of a function that keeps what it computes, run in named pipelines.

    from app.passes import parse_passes, resolve, run_pipeline
    pipeline = resolve(parse_passes("default"))
    optimized, report = run_pipeline(program, pipeline)   # `program` itself is left as it was
    kernel_json["passes"] = report.to_json()

docs/passes.md lists every pass of the catalogue with its status, and how to write one.
"""

from app.passes.catalogue import PASSES
from app.passes.pipelines import (
    AUTHORS_CHOICES,
    DEFAULT,
    DEFAULT_CHOICE,
    NO_PASSES,
    PIPELINES,
    VERSION,
    PassChoice,
    Pipeline,
    hand_written,
    parse_passes,
    resolve,
)
from app.passes.run import Change, PassError, PassReport, run_pipeline

__all__ = [
    "AUTHORS_CHOICES",
    "DEFAULT",
    "DEFAULT_CHOICE",
    "NO_PASSES",
    "PASSES",
    "PIPELINES",
    "VERSION",
    "Change",
    "PassChoice",
    "PassError",
    "PassReport",
    "Pipeline",
    "hand_written",
    "parse_passes",
    "resolve",
    "run_pipeline",
]
