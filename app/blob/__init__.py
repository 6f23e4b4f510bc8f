"""Blob Storage v2 (``weight.bin``): the only module that knows these bytes."""

from .dtype_codes import (
    BlobDType,
    blob_dtype,
    blob_dtype_for,
    pack_subbyte,
    packed_size,
    unpack_subbyte,
)
from .format import BlobEntry, BlobFormatError
from .reader import BlobReader
from .writer import BlobWriter

__all__ = [
    "BlobDType",
    "BlobEntry",
    "BlobFormatError",
    "BlobReader",
    "BlobWriter",
    "blob_dtype",
    "blob_dtype_for",
    "pack_subbyte",
    "packed_size",
    "unpack_subbyte",
]
