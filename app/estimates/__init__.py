"""Estimates of what a build costs on each chip, kept out of the artifact's bytes (recalibrating
must not change an artifact): device names checked against the table, and (app/estimates/build.py)
the FLOPs, bytes and predicted latency of every program of a built kernel, graph or chain.
"""

from app.estimates.devices import DEFAULT_DEVICES, device_or_error, devices_or_error, path_or_error

__all__ = ["DEFAULT_DEVICES", "device_or_error", "devices_or_error", "path_or_error"]
