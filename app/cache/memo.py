"""A memo of exact request bytes -> artifact key, so a repeated JSON request is served from the
cache without parsing it again (parsing a 64×64 inline weight costs more than the whole hit).

The key of the memo is the request itself (path op + body bytes): a dict lookup hashes it and
compares it byte for byte, so two different requests can never share an entry (a digest would
cost twice as much here and still only be probably unique). Only requests that validated and
built (or found) their artifact are remembered, and a memo hit still goes through the artifact
cache and its digest check, so the memo can only skip work, never change an answer. Bounded by
entries and by bytes: the oldest are dropped first.
"""

from __future__ import annotations

from collections import OrderedDict

Fingerprint = tuple[str, bytes]


def fingerprint_of(path_op: str | None, raw: bytes) -> Fingerprint:
    return (path_op or "", raw)


class RequestMemo:
    def __init__(self, max_entries: int = 4096, max_bytes: int = 32 << 20):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[Fingerprint, tuple[str, str]] = OrderedDict()  # -> (op, key)
        self._bytes = 0

    def get(self, fingerprint: Fingerprint) -> tuple[str, str] | None:
        found = self._entries.get(fingerprint)
        if found is not None:
            self._entries.move_to_end(fingerprint)
        return found

    def put(self, fingerprint: Fingerprint, op: str, key: str) -> None:
        if len(fingerprint[1]) > self.max_bytes // 8:
            return  # a body this large is rare enough not to be worth the memory
        if fingerprint not in self._entries:
            self._bytes += len(fingerprint[1])
        self._entries[fingerprint] = (op, key)
        self._entries.move_to_end(fingerprint)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            old, _ = self._entries.popitem(last=False)
            self._bytes -= len(old[1])

    def forget(self, fingerprint: Fingerprint) -> None:
        if self._entries.pop(fingerprint, None) is not None:
            self._bytes -= len(fingerprint[1])
