"""Toolchain profiles: which release of Apple's `coremlcompiler` the writer emulates.

A profile fixes the two buildInfo entries the compiler adds to every program
(`coremlc-version`, `coremlc-component-MIL`) and the few layout details that differ between
releases. Evidence per profile:

- 3402.4.1 (MIL 3402.3.2): coremltools' `add_model.mlmodelc`. Its two text files (`model.mil`,
  `metadata.json`) end with a newline, unlike every other golden; that is likely the doing of
  that repository's end-of-file hook rather than Apple's: the profile reproduces the files as
  published, and no release not observed inherits it (`get_profile`).
- 3404.23.1 (MIL 3405.2.1): three bundles of a public speech project (FluidInference/FluidAudio
  at b1661f0 and f88b126, `Sources/FluidAudio/Resources/OptimizationModels/`: Argmax,
  TokenDurationPrediction, TransposeEncoder; spec 7, `program(1.0)`), kept out of the tests as an
  outside check. `model.mil` and `metadata.json` end without a newline, as every Apple output
  but 3402.4.1's published one; TransposeEncoder's flexible input carries
  FlexibleShapeInformation.
- 3500.32.1 (MIL 3500.14.1): the four silero-vad bundles (spec 6 and 7). The default: the only
  release for which whole bundles (every file) exist as goldens. The same release has shipped
  with MIL 3510.2.1 in other public bundles (recorded beside the ios17-text goldens): both pairs
  are observed.
- A release or pair not observed is written with its own version strings and the layout rules of
  the nearest observed release (`get_profile`), and reports say so (`ToolchainProfile.describe`).
- 3520.5.1 (MIL 3520.4.1) and 3600.25.1 (MIL 3600.16.1): `model.mil` texts only.

Dialect (`dialect_for`): every golden with specification version 9 (iOS18) is `program(1.3)`,
every one with 6-8 is `program(1.0)`, whatever the compiler (3520.5.1 writes both: 1.0 for the
spec-8 KokoroNoise bundle, 1.3 for a spec-9 model). Not seen: 3402/3500 given a spec-9 model,
3600 given a spec 6-8 model, any compiler given spec 10 (iOS26); the same rule is applied to
them.

FlexibleShapeInformation (the function attribute compilers derive from flexible input shapes):
written by 3520 and 3600 (goldens). No 3402/3500 golden has a flexible input; a published note
(FluidAudio issue 738) says bundles from older compilers lack the attribute, so those profiles
do not write it. That choice is not proven by a golden.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from app.language.dialect import DIALECTS, PROGRAM_1_0, Dialect
from app.language.errors import UnknownProfileError
from app.language.targets import ALL_TARGETS


@dataclass(frozen=True)
class ToolchainProfile:
    coremlc_version: str
    mil_version: str
    text_ends_with_newline: bool
    writes_flexible_shape_info: bool
    # None for a release (and MIL component) seen in Apple's output; else the observed release
    # whose layout rules are applied to these version strings, which the report says.
    rules_of: str | None = None
    # other MIL components the release has been seen to carry (the first, `mil_version`, is the
    # one written when none is asked for)
    other_mil_versions: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.coremlc_version

    @property
    def observed(self) -> bool:
        return self.rules_of is None

    def build_info(self) -> dict[str, str]:
        """The entries this compiler adds to (or overwrites in) the program's buildInfo."""
        return {"coremlc-component-MIL": self.mil_version, "coremlc-version": self.coremlc_version}

    def describe(self) -> str:
        """For reports: the versions written, and whose rules when they were not observed."""
        text = f"coremlcompiler {self.coremlc_version} (MIL {self.mil_version})"
        if self.rules_of is not None:
            text += f", written with the layout rules of {self.rules_of}: not observed"
        return text


PROFILES: dict[str, ToolchainProfile] = {
    p.coremlc_version: p
    for p in (
        ToolchainProfile(
            "3402.4.1", "3402.3.2", text_ends_with_newline=True, writes_flexible_shape_info=False
        ),
        ToolchainProfile(
            "3404.23.1", "3405.2.1", text_ends_with_newline=False, writes_flexible_shape_info=True
        ),
        # the silero-vad goldens carry MIL 3500.14.1; the ios17-text goldens' README records
        # bundles of the same release carrying 3510.2.1
        ToolchainProfile(
            "3500.32.1",
            "3500.14.1",
            text_ends_with_newline=False,
            writes_flexible_shape_info=False,
            other_mil_versions=("3510.2.1",),
        ),
        ToolchainProfile(
            "3520.5.1", "3520.4.1", text_ends_with_newline=False, writes_flexible_shape_info=True
        ),
        ToolchainProfile(
            "3600.25.1", "3600.16.1", text_ends_with_newline=False, writes_flexible_shape_info=True
        ),
    )
}
DEFAULT_PROFILE = PROFILES["3500.32.1"]
_VERSION = re.compile(r"\d+(\.\d+){1,3}\Z")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _check_version(version: str, what: str) -> None:
    if not _VERSION.match(version):
        raise UnknownProfileError(
            f"{what} {version!r} is not a release number such as 3500.32.1", "profile"
        )


def _nearest(coremlc_version: str) -> ToolchainProfile:
    """The newest observed release not newer than `coremlc_version` (the oldest when all are):
    releases between two observed ones are taken to write as the earlier did until one is seen."""
    known = sorted(PROFILES.values(), key=lambda p: _key(p.coremlc_version))
    older = [p for p in known if _key(p.coremlc_version) <= _key(coremlc_version)]
    return older[-1] if older else known[0]


def get_profile(
    coremlc_version: str | None = None, mil_version: str | None = None
) -> ToolchainProfile:
    """The profile for a coremlc release and MIL component (default `DEFAULT_PROFILE`).

    A release and component seen together in Apple's output give that observed profile. Any other
    well-formed pair is written with these exact version strings and the layout rules of the
    nearest observed release (`rules_of` says which), not refused: there are many releases
    between the observed ones, and a decompiled bundle must compile back with its own pair."""
    if coremlc_version is None and mil_version is None:
        return DEFAULT_PROFILE
    if coremlc_version is None:
        assert mil_version is not None
        _check_version(mil_version, "MIL version")
        for profile in PROFILES.values():
            if mil_version in (profile.mil_version, *profile.other_mil_versions):
                return replace(profile, mil_version=mil_version)
        raise UnknownProfileError(
            f"MIL version {mil_version!r} was never seen with a known release; name the "
            f"coremlc version too (known: {_known()})",
            "profile",
        )
    _check_version(coremlc_version, "coremlc version")
    if mil_version is not None:
        _check_version(mil_version, "MIL version")
    known = PROFILES.get(coremlc_version)
    if known is not None:
        seen = (known.mil_version, *known.other_mil_versions)
        if mil_version is None or mil_version == known.mil_version:
            return known
        if mil_version in seen:
            return replace(known, mil_version=mil_version)
        return _unobserved(known, coremlc_version, mil_version)
    rules = _nearest(coremlc_version)
    return _unobserved(rules, coremlc_version, mil_version or rules.mil_version)


def _unobserved(rules: ToolchainProfile, coremlc: str, mil: str) -> ToolchainProfile:
    """A pair not seen in Apple's output, written with `rules`' layout. Its text files end
    without a newline whatever `rules` says: only 3402.4.1's published files have one, most
    likely added by their repository, and every release observed since writes none."""
    return replace(
        rules,
        coremlc_version=coremlc,
        mil_version=mil,
        rules_of=rules.coremlc_version,
        other_mil_versions=() if coremlc != rules.coremlc_version else rules.other_mil_versions,
        text_ends_with_newline=False,
    )


def _known() -> str:
    return ", ".join(f"{p.coremlc_version} (MIL {p.mil_version})" for p in PROFILES.values())


def dialect_for(spec_version: int) -> Dialect:
    """The dialect of the newest target at or below `spec_version` (the target table's program
    version: `program(1.3)` from specification 9 on, `program(1.0)` before)."""
    known = [t for t in ALL_TARGETS.values() if t.spec_version <= spec_version]
    if not known:
        return PROGRAM_1_0
    return DIALECTS[max(known, key=lambda t: t.spec_version).program_version]
