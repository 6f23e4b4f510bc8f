"""The naming rule for models and the names users choose inside them (state buffers, manifest
kernels): an identifier of ASCII letters, digits and `_`, not starting with a digit, at most 64
characters. It is a valid MIL identifier, a safe file name and a safe zip path all at once."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

MAX_LENGTH = 64
PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_NAME = re.compile(PATTERN)

Identifier = Annotated[str, Field(pattern=PATTERN, min_length=1, max_length=MAX_LENGTH)]


def name_problem(name: str) -> str | None:
    """Why `name` breaks the rule, or None when it is a good name."""
    if not _NAME.match(name) or len(name) > MAX_LENGTH:
        return f"{name!r} must be an identifier (letters, digits, _) of at most {MAX_LENGTH} characters"
    return None
