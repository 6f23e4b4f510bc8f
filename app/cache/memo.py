"""A memo of exact request bytes -> artifact key, so a repeated JSON request is served from the
cache without parsing it again (parsing a 64×64 inline weight costs more than the whole hit).

Only requests that validated and built (or found) their artifact are remembered, and a memo hit
still goes through the artifact cache (and its digest check), so it can only skip work, never
change an answer. Bounded: the oldest fingerprints are dropped first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict


def fingerprint_of(path_op: str | None, raw: bytes) -> str:
    h = hashlib.sha256((path_op or "").encode() + b"\0")
    h.update(raw)
    return h.hexdigest()


class RequestMemo:
    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[str, str]] = OrderedDict()  # fp -> (op, key)

    def get(self, fingerprint: str) -> tuple[str, str] | None:
        found = self._entries.get(fingerprint)
        if found is not None:
            self._entries.move_to_end(fingerprint)
        return found

    def put(self, fingerprint: str, op: str, key: str) -> None:
        self._entries[fingerprint] = (op, key)
        self._entries.move_to_end(fingerprint)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, fingerprint: str) -> None:
        self._entries.pop(fingerprint, None)
