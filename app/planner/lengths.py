"""A kit's lengths: the positions its KV cache holds (`context`) and the tokens per prefill
call (`prefill`), with the defaults `plan` and `model` share, checked against each other and the
model's positions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.checkpoints.config import check_window
from app.errors import RequestError

DEFAULT_CONTEXT = 512
DEFAULT_PREFILL = 64
DEFAULT_PROMPT = 512  # the prompt a plan's prefill speed is predicted for (at most the context)


def lengths(
    config: Mapping[str, Any], context: int | None = None, prefill: int | None = None
) -> tuple[int, int]:
    """(context, prefill) of a kit: the options', or the defaults (min(512,
    max_position_embeddings), min(64, context)); checked against each other, the model's
    positions and its sliding window."""
    limit = _max_positions(config)
    context = min(DEFAULT_CONTEXT, limit or DEFAULT_CONTEXT) if context is None else context
    prefill = min(DEFAULT_PREFILL, context) if prefill is None else prefill
    for name, value in (("context", context), ("prefill", prefill)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RequestError(name, f"a positive number of tokens, not {value!r}")
    if prefill > context or context % prefill:
        raise RequestError(
            "prefill",
            f"{prefill} tokens per chunk must divide the context of "
            f"{context} (chunks start at multiples of it and must end within "
            f"the cache); {_divisors_near(context, prefill)}",
        )
    if limit is not None and context > limit:
        raise RequestError(
            "context",
            f"{context} positions is over the model's max_position_embeddings of {limit} "
            f"(config.json); ask for at most {limit}",
        )
    check_window(dict(config), context)
    return context, prefill


def _max_positions(config: Mapping[str, Any]) -> int | None:
    value = config.get("max_position_embeddings")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _divisors_near(context: int, prefill: int) -> str:
    """The chunk sizes nearest the one asked for: the largest divisor of the context not above
    it, and the next one up (when the ask is below the context)."""
    divisors = [d for d in range(1, context + 1) if context % d == 0]
    below = max(d for d in divisors if d <= prefill)
    above = [d for d in divisors if d > prefill]
    return f"e.g. {below}" + (f" or {above[0]}" if above else "")
