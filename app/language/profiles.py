"""Toolchain profiles: which release of Apple's `coremlcompiler` the writer emulates.

A profile fixes the two buildInfo entries the compiler adds to every program
(`coremlc-version`, `coremlc-component-MIL`) and the few layout details that differ between
releases. Evidence per profile:

- 3402.4.1 (MIL 3402.3.2): coremltools' `add_model.mlmodelc`. Its two text files (`model.mil`,
  `metadata.json`) end with a newline, unlike every other golden; that is likely the doing of
  that repository's end-of-file hook rather than Apple's: the profile reproduces the files as
  published.
- 3500.32.1 (MIL 3500.14.1): the four silero-vad bundles (spec 6 and 7). The default: the only
  release for which whole bundles (every file) exist as goldens.
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

from dataclasses import dataclass

from app.language.dialect import DIALECTS, PROGRAM_1_0, Dialect
from app.language.errors import UnknownProfileError
from app.language.targets import ALL_TARGETS


@dataclass(frozen=True)
class ToolchainProfile:
    coremlc_version: str
    mil_version: str
    text_ends_with_newline: bool
    writes_flexible_shape_info: bool

    @property
    def name(self) -> str:
        return self.coremlc_version

    def build_info(self) -> dict[str, str]:
        """The entries this compiler adds to (or overwrites in) the program's buildInfo."""
        return {"coremlc-component-MIL": self.mil_version, "coremlc-version": self.coremlc_version}


PROFILES: dict[str, ToolchainProfile] = {
    p.coremlc_version: p
    for p in (
        ToolchainProfile(
            "3402.4.1", "3402.3.2", text_ends_with_newline=True, writes_flexible_shape_info=False
        ),
        ToolchainProfile(
            "3500.32.1", "3500.14.1", text_ends_with_newline=False, writes_flexible_shape_info=False
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


def get_profile(
    coremlc_version: str | None = None, mil_version: str | None = None
) -> ToolchainProfile:
    """The profile for a coremlc release (default `DEFAULT_PROFILE`); `mil_version`, when given,
    must be the MIL component that release carries."""
    if coremlc_version is None:
        if mil_version is None:
            return DEFAULT_PROFILE
        matches = [p for p in PROFILES.values() if p.mil_version == mil_version]
        if not matches:
            raise UnknownProfileError(_unknown(f"MIL version {mil_version!r}"), "profile")
        return matches[0]
    profile = PROFILES.get(coremlc_version)
    if profile is None:
        raise UnknownProfileError(_unknown(f"coremlc version {coremlc_version!r}"), "profile")
    if mil_version is not None and mil_version != profile.mil_version:
        raise UnknownProfileError(
            f"coremlc {coremlc_version} carries MIL {profile.mil_version}, not {mil_version}",
            "profile",
        )
    return profile


def _unknown(what: str) -> str:
    known = ", ".join(f"{p.coremlc_version} (MIL {p.mil_version})" for p in PROFILES.values())
    return f"unknown {what}; known profiles: {known}"


def dialect_for(spec_version: int) -> Dialect:
    """The dialect of the newest target at or below `spec_version` (the target table's program
    version: `program(1.3)` from specification 9 on, `program(1.0)` before)."""
    known = [t for t in ALL_TARGETS.values() if t.spec_version <= spec_version]
    if not known:
        return PROGRAM_1_0
    return DIALECTS[max(known, key=lambda t: t.spec_version).program_version]
