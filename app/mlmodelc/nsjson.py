"""JSON as Foundation's NSJSONSerialization pretty-prints an NSDictionary: key order included.

Apple writes `metadata.json` from NSDictionary objects, so its key order is the order of the
dictionary's hash table, not an order anyone chose. That table is reproduced here:

- a key's hash is CFString's (`__CFStrHashCharacters`: the length, then four UTF-16 units at a
  time `h = h*67503105 + c0*16974593 + c1*66049 + c2*257 + c3`, the rest one at a time
  `h = h*257 + c`, only the first, middle and last 32 units of strings over 96, and finally
  `h + (h << (length & 31))`, all modulo 2^64);
- slots are `hash % size` with linear probing, sizes from Foundation's prime table
  (3, 7, 13, 23, 41, ...); a mutable dictionary grows to the next size before an insertion would
  leave it without a free slot, re-inserting its keys in slot order; an immutable one
  (`FrozenDict`: `userDefinedMetadata`) is made at the smallest size that holds its keys, a full
  table allowed (3 keys in 3 slots: the only size that explains the orders of the 3-key
  `userDefinedMetadata` in four bundles).

Checked against every metadata.json at hand (the five goldens plus ten more Apple-compiled
bundles): all of their dictionaries come out in Apple's order given one fixed insertion order per
dictionary kind (see `metadata`), and the op histograms given the program's op order.

Layout: two-space indents, `"key" : value`, empty containers as `[\\n\\n<indent>]`, `/` escaped as
`\\/` (NSJSONSerialization's default), no newline at the end.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_M64 = (1 << 64) - 1
_SIZES = (0, 3, 7, 13, 23, 41, 71, 127, 191, 251, 383, 631, 1087, 1723, 2803, 4523, 7351, 11959)
# Keys an immutable dictionary of each size holds (a full table is allowed).
_CAPACITIES = (0, 3, 6, 11, 19, 32, 52, 85, 118, 155, 237, 390, 672, 1065, 1732, 2795, 4543, 7391)


class FrozenDict(dict):
    """A dictionary Apple builds immutable in one go (sized for its count, then filled in
    order) rather than growing it: written in that table's order by `dumps`."""


@functools.lru_cache(maxsize=4096)
def cf_string_hash(text: str) -> int:
    units = memoryview(text.encode("utf-16-le")).cast("H")
    n = len(units)
    h = n

    def fours(h: int, start: int, stop: int) -> int:
        for i in range(start, stop, 4):
            h = (
                h * 67503105
                + units[i] * 16974593
                + units[i + 1] * 66049
                + units[i + 2] * 257
                + units[i + 3]
            ) & _M64
        return h

    if n <= 96:
        whole = n & ~3
        h = fours(h, 0, whole)
        for i in range(whole, n):
            h = (h * 257 + units[i]) & _M64
    else:
        h = fours(h, 0, 32)
        middle = (n >> 1) - 16
        h = fours(h, middle, middle + 32)
        h = fours(h, n - 32, n)
    return (h + (h << (n & 31))) & _M64


def _place(table: list[str | None], key: str, hashes: dict[str, int]) -> None:
    size = len(table)
    i = hashes[key] % size
    while table[i] is not None:
        i = (i + 1) % size
    table[i] = key


def ns_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of an NSMutableDictionary after inserting `keys` in this order."""
    return list(_ns_order(tuple(dict.fromkeys(keys))))


@functools.lru_cache(maxsize=1024)
def _ns_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    hashes = {k: cf_string_hash(k) for k in keys}
    table: list[str | None] = []
    size_index = 0
    for count, key in enumerate(keys):
        while _SIZES[size_index] == 0 or count + 1 > _SIZES[size_index] - 1:
            size_index += 1
            if size_index >= len(_SIZES):
                raise ValueError(f"more than {_SIZES[-1] - 1} keys in one dictionary")
            old = [k for k in table if k is not None]
            table = [None] * _SIZES[size_index]
            for k in old:
                _place(table, k, hashes)
        _place(table, key, hashes)
    return tuple(k for k in table if k is not None)


def frozen_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of an immutable NSDictionary created from `keys` in this order."""
    keys = list(dict.fromkeys(keys))
    hashes = {k: cf_string_hash(k) for k in keys}
    index = next((i for i, cap in enumerate(_CAPACITIES) if cap >= len(keys)), None)
    if index is None:
        raise ValueError(f"more than {_CAPACITIES[-1]} keys in one dictionary")
    table: list[str | None] = [None] * _SIZES[index]
    for key in keys:
        _place(table, key, hashes)
    return [k for k in table if k is not None]


_PLAIN = re.compile(r'[^"\\/\x00-\x1f]*\Z')


def _escape(text: str) -> str:
    if _PLAIN.match(text):
        return f'"{text}"'
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "/":
            out.append("\\/")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _dump(value: Any, indent: int, out: list[str]) -> None:
    pad = " " * (indent + 2)
    if isinstance(value, Mapping):
        if not value:
            out.append("{\n\n" + " " * indent + "}")
            return
        out.append("{\n")
        order = frozen_order if isinstance(value, FrozenDict) else ns_order
        for i, key in enumerate(order(value.keys())):
            out.append(f"{pad}{_escape(key)} : ")
            _dump(value[key], indent + 2, out)
            out.append(",\n" if i < len(value) - 1 else "\n")
        out.append(" " * indent + "}")
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            out.append("[\n\n" + " " * indent + "]")
            return
        out.append("[\n")
        for i, item in enumerate(value):
            out.append(pad)
            _dump(item, indent + 2, out)
            out.append(",\n" if i < len(value) - 1 else "\n")
        out.append(" " * indent + "]")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(_escape(value))
    else:
        raise TypeError(f"no JSON spelling for {type(value).__name__}")


def dumps(value: Any) -> str:
    """NSJSONSerialization pretty-printed text; dicts are written in NSDictionary order, their
    Python order being taken as the order the keys were inserted."""
    out: list[str] = []
    _dump(value, 0, out)
    return "".join(out)
