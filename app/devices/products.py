"""Device names as people type them: the table's chip names, the chips' own titles and Apple's
product names, in any case and spacing ("iPhone 16 Pro", "iphone16pro" and "A18 Pro" are all
`a18-pro`; "M4" is `m4`). One table, here, for every request and command that takes a device
(`ane-kernels devices` and docs/devices.md list it).

A product line whose models hold different chips (a MacBook Pro, an iPad Air, "iPhone") is not
one device: it is answered with its candidate chips, and "<line> <chip>" ("MacBook Pro M4 Max")
names one. Which product holds which chip: the `apple-products` source (app/devices/sources.py).
"""

from __future__ import annotations

import re

from app.devices.table import CHIPS, CHIPS_BY_NAME, IPHONE, Chip

PRODUCTS_SOURCE = "apple-products"  # app/devices/sources.py

# A model that holds one chip -> that chip (`apple-products`). iPhones and the iPad mini: the
# table's phone chips.
PRODUCTS: dict[str, str] = {
    "iPhone 13 mini": "a15",
    "iPhone 13": "a15",
    "iPhone 13 Pro": "a15",
    "iPhone 13 Pro Max": "a15",
    "iPhone SE (3rd generation)": "a15",
    "iPhone 14": "a15",
    "iPhone 14 Plus": "a15",
    "iPhone 14 Pro": "a16",
    "iPhone 14 Pro Max": "a16",
    "iPhone 15": "a16",
    "iPhone 15 Plus": "a16",
    "iPhone 15 Pro": "a17-pro",
    "iPhone 15 Pro Max": "a17-pro",
    "iPhone 16": "a18",
    "iPhone 16 Plus": "a18",
    "iPhone 16e": "a18",
    "iPhone 16 Pro": "a18-pro",
    "iPhone 16 Pro Max": "a18-pro",
    "iPhone Air": "a19-pro",
    "iPhone 17 Pro": "a19-pro",
    "iPhone 17 Pro Max": "a19-pro",
    "iPad mini (6th generation)": "a15",
    "iPad mini (A17 Pro)": "a17-pro",
}

# A product line -> the chips of the table its models hold (`apple-products`; a Mac Studio's
# Ultra chips are not in the table).
FAMILIES: dict[str, tuple[str, ...]] = {
    "iPhone": tuple(c.name for c in CHIPS if c.kind == IPHONE),
    "iPad mini": ("a15", "a17-pro"),
    "iPad Air": ("m1", "m2", "m3", "m4"),
    "iPad Pro": ("m1", "m2", "m4", "m5"),
    "MacBook Air": ("m1", "m2", "m3", "m4"),
    "MacBook Pro": (
        "m1",
        "m1-pro",
        "m1-max",
        "m2",
        "m2-pro",
        "m2-max",
        "m3",
        "m3-pro",
        "m3-max",
        "m4",
        "m4-pro",
        "m4-max",
        "m5",
        "m5-pro",
        "m5-max",
    ),
    "Mac mini": ("m1", "m2", "m2-pro", "m4", "m4-pro"),
    "iMac": ("m1", "m3", "m4"),
    "Mac Studio": ("m1-max", "m2-max", "m4-max"),
}


def spelling(name: str) -> str:
    """What two spellings of one name share: lower case, letters and digits only."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


# every accepted spelling -> the chip's name: the names, the titles ("A15 Bionic", "M1 Max"), the
# products, and a title without Apple's "Bionic"
_ALIASES: dict[str, str] = {
    **{spelling(p): chip for p, chip in PRODUCTS.items()},
    **{spelling(c.title.removesuffix(" Bionic")): c.name for c in CHIPS},
    **{spelling(c.title): c.name for c in CHIPS},
    **{spelling(c.name): c.name for c in CHIPS},
}
_FAMILIES = {spelling(f): f for f in FAMILIES}


class UnknownDevice(LookupError):
    """A device name the table does not hold; the message names the ones it does (or, for a
    product line, the chips its models hold)."""

    def __init__(self, name: object, family: str | None = None):
        self.name = name
        if family is not None:
            chips = ", ".join(FAMILIES[family])
            message = (
                f"{name!r} is a product line whose models hold different chips: {chips}; name "
                f"the chip (e.g. {FAMILIES[family][-1]}) or the model"
            )
        else:
            message = (
                f"{name!r} is not a known device; known: {', '.join(CHIPS_BY_NAME)} (or a "
                "product name: ane-kernels devices lists them)"
            )
        super().__init__(message)


def get_chip(name: str) -> Chip:
    """The chip `name` names: a chip, its title or a product, in any case and spacing; "<line>
    <chip>" picks a chip of a product line. A product line alone, or an unknown name, raises
    UnknownDevice saying what would do."""
    if not isinstance(name, str):
        raise UnknownDevice(name)
    key = spelling(name)
    if key in _ALIASES:
        return CHIPS_BY_NAME[_ALIASES[key]]
    if key in _FAMILIES:
        raise UnknownDevice(name, _FAMILIES[key])
    for line, family in _FAMILIES.items():
        chip = _ALIASES.get(key.removeprefix(line)) if key.startswith(line) else None
        if chip is not None and chip in FAMILIES[family]:
            return CHIPS_BY_NAME[chip]
    raise UnknownDevice(name)


def aliases_of(chip: str) -> list[str]:
    """The product names that name `chip`, as `ane-kernels devices` lists them: its models, and
    "<line> <chip>" for a line whose models of that chip have no name of their own here."""
    exact = [p for p, c in PRODUCTS.items() if c == chip]
    title = CHIPS_BY_NAME[chip].title
    lines = [
        f"{line} {title}"
        for line, chips in FAMILIES.items()
        if chip in chips and not any(p.startswith(line) for p in exact)
    ]
    return exact + lines
