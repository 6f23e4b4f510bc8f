"""Lays out a program's blob-backed consts in one weight.bin (the ANE compiler refuses more than
16 weight files, so every tensor shares one); identical tensors are stored once."""

from __future__ import annotations

from app.blob import BlobWriter, blob_dtype
from app.mil import Program


def plan_weights(program: Program) -> tuple[BlobWriter, dict[str, int]]:
    """The writer (nothing written yet) and each blob const's metadata offset, by const name."""
    writer = BlobWriter()
    offsets = {}
    for op in program.blob_consts():
        assert op.value is not None and not isinstance(op.value.data, str)
        if op.name in offsets:
            # another function's const of this name: it holds the same value (offsets are
            # looked up by name; app/kernels/functions.py renames those that differ), which
            # the writer would find stored already, after packing and comparing it whole
            continue
        dtype = blob_dtype(op.value.type.dtype)
        if op.value.type.dtype.is_subbyte:  # packed LSB-first, as coremltools' writer does
            offsets[op.name] = writer.add_subbyte(op.value.stored_array(), dtype)
        else:
            offsets[op.name] = writer.add(op.value.data, dtype)
    return writer, offsets
