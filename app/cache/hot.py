"""Small artifacts kept in memory, so a cache hit answers without opening a file.

Each copy is tied to the (inode, size, mtime) signature its file had when it was verified; the
store stats the file on every lookup, so a file changed on disk (say, corrupted) no longer
matches and is verified again instead of being served from here.
"""

from __future__ import annotations

from collections import OrderedDict

Signature = tuple[int, int, int]
# An artifact up to this size is "small": a build hands it back with its result and it is kept
# here, so answering it needs no file read.
SMALL_ARTIFACT_BYTES = 1 << 20


class HotArtifacts:
    def __init__(self, max_bytes: int = 64 << 20, max_item_bytes: int = SMALL_ARTIFACT_BYTES):
        self.max_bytes, self.max_item_bytes = max_bytes, max_item_bytes
        self._items: OrderedDict[str, tuple[Signature, bytes]] = OrderedDict()
        self._bytes = 0

    def get(self, key: str, signature: Signature | None) -> bytes | None:
        found = self._items.get(key)
        if found is None or signature is None or found[0] != signature:
            return None
        self._items.move_to_end(key)
        return found[1]

    def put(self, key: str, signature: Signature | None, content: bytes) -> None:
        if signature is None or len(content) > self.max_item_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= len(old[1])
        self._items[key] = (signature, content)
        self._bytes += len(content)
        while self._bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self._bytes -= len(dropped)
