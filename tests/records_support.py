"""The op records extended for one test: `extended(record)` adds records to the explicit list in
app.mil.ops for the length of a `with`, and restores the list after. Every reader of op facts
goes through that list at call time, so a record added here is seen everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from app.mil import ops
from app.mil.ops import OpRecord


@contextmanager
def extended(*records: OpRecord) -> Iterator[None]:
    saved = ops.RECORDS
    ops.RECORDS = (*saved, *records)
    try:
        yield
    finally:
        ops.RECORDS = saved
