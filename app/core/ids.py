"""Random identifiers for temp files and request ids.

They only have to be unique, not unguessable: the process's PRNG (seeded from the OS once per
process) draws them, where uuid4 would read os.urandom, a system call per id on the hot paths.
"""

from __future__ import annotations

import random


def random_hex() -> str:
    """32 hex digits (128 random bits)."""
    return f"{random.getrandbits(128):032x}"
