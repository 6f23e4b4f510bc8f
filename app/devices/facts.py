"""One number of the device table, with where it comes from and how sure it is.

`measured`: someone measured it on that chip. `specified`: the vendor publishes it (a rating, a
memory size). `extrapolated`: no one measured it on that chip; it is carried over from the chips
named in `basis` (a `note` says by what rule). `assumed`: no public figure exists; the note says
what was assumed and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

V = TypeVar("V", covariant=True)  # the kind of value: a count, a rate, a yes or no
T = TypeVar("T")


class Provenance(StrEnum):
    MEASURED = "measured"
    SPECIFIED = "specified"
    EXTRAPOLATED = "extrapolated"
    ASSUMED = "assumed"


@dataclass(frozen=True)
class Fact(Generic[V]):
    value: V
    source: str  # a key of app.devices.sources.SOURCES
    provenance: Provenance
    basis: tuple[str, ...] = ()  # for an extrapolated fact: the chips it is carried over from
    note: str = ""

    def mark(self) -> str:
        """`measured`, or `extrapolated from m4, m5`: the provenance as the docs print it."""
        if self.provenance is Provenance.EXTRAPOLATED and self.basis:
            return f"extrapolated from {', '.join(self.basis)}"
        return self.provenance.value

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "value": self.value,
            "source": self.source,
            "provenance": self.provenance.value,
        }
        if self.basis:
            out["basis"] = list(self.basis)
        if self.note:
            out["note"] = self.note
        return out


def measured(value: T, source: str, note: str = "") -> Fact[T]:
    return Fact(value, source, Provenance.MEASURED, note=note)


def specified(value: T, source: str, note: str = "") -> Fact[T]:
    return Fact(value, source, Provenance.SPECIFIED, note=note)


def extrapolated(value: T, source: str, basis: tuple[str, ...], note: str = "") -> Fact[T]:
    return Fact(value, source, Provenance.EXTRAPOLATED, basis, note)


def assumed(value: T, source: str, note: str = "") -> Fact[T]:
    return Fact(value, source, Provenance.ASSUMED, note=note)


def carried(fact: Fact[T], basis: tuple[str, ...], note: str = "") -> Fact[T]:
    """`fact`, measured or specified on the chips in `basis`, carried over to another chip."""
    if fact.provenance is Provenance.ASSUMED:
        return fact
    return Fact(fact.value, fact.source, Provenance.EXTRAPOLATED, basis, note or fact.note)
