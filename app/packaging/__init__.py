"""Packaging: .mlpackage and MIL bundles, kernel.json, deterministic zips."""

from app.packaging.bundle import FORMATS, manifest, write_kernel_zip
from app.packaging.describe import build_info, coremltools_version, tensor_digest
from app.packaging.weights import plan_weights
from app.packaging.zipwriter import Entry, write_zip

__all__ = [
    "FORMATS",
    "Entry",
    "build_info",
    "coremltools_version",
    "manifest",
    "plan_weights",
    "tensor_digest",
    "write_kernel_zip",
    "write_zip",
]
