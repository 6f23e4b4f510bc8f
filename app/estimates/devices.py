"""Device names as requests give them: the table's chips, or a problem naming the known ones."""

from __future__ import annotations

from collections.abc import Iterable

from app.devices import CHIPS_BY_NAME, Chip, UnknownDevice, get_chip
from app.devices.estimate_model import PATHS
from app.errors import RequestError

# The chips an estimate covers when a request names none: one per ANE generation and kind that
# users ask about most (a base Mac, a Max, a current phone).
DEFAULT_DEVICES = ("m1", "m1-max", "m4", "m4-max", "a17-pro", "a18-pro")


def device_or_error(name: str, field: str = "device") -> Chip:
    try:
        return get_chip(name)
    except UnknownDevice as exc:
        raise RequestError(field, str(exc), known=list(CHIPS_BY_NAME)) from None


def devices_or_error(names: Iterable[str] | None, field: str = "device") -> list[Chip]:
    """The chips named (each checked), or the default set when `names` is empty or None."""
    chosen = [n for n in (names or ()) if n] or list(DEFAULT_DEVICES)
    return [device_or_error(n, field) for n in chosen]


def path_or_error(path: str, field: str = "path") -> str:
    if path not in PATHS:
        raise RequestError(field, f"{path!r} is not a runtime path; one of {', '.join(PATHS)}")
    return path
