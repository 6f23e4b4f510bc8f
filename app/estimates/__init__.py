"""Estimates of what a build costs on each chip, kept out of the artifact's bytes (recalibrating
must not change an artifact): device names checked against the table; a built program's work
(FLOPs, weight and activation bytes: app/estimates/work.py) and its price on chips, per program
(app/estimates/estimate.py).

    works, kind = build_works(prepared.build, prepared.chain)
    estimate_works(works, kind, devices_or_error(["m4"]))   # per device: latency range, bound, fit
    header_value(works, kind)                               # X-ANE-Estimate
"""

from app.estimates.devices import DEFAULT_DEVICES, device_or_error, devices_or_error, path_or_error
from app.estimates.estimate import estimate_works, header_value, works_from_json, works_to_json
from app.estimates.work import ProgramWork, build_works, program_works

__all__ = [
    "DEFAULT_DEVICES",
    "ProgramWork",
    "build_works",
    "device_or_error",
    "devices_or_error",
    "estimate_works",
    "header_value",
    "path_or_error",
    "program_works",
    "works_from_json",
    "works_to_json",
]
