"""Packaging: .mlpackage and MIL bundles, kernel.json, deterministic zips."""

from app.packaging.bundle import manifest, write_chain_zip, write_kernel_zip
from app.packaging.describe import build_info, to_json
from app.packaging.weight_file import plan_weights
from app.packaging.zipwriter import Entry, ZipSink, write_zip

__all__ = [
    "Entry",
    "ZipSink",
    "build_info",
    "manifest",
    "plan_weights",
    "to_json",
    "write_chain_zip",
    "write_kernel_zip",
    "write_zip",
]
