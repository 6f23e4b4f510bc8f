"""The device table: every per-chip fact the preflight, the estimates and the planner read.

One `Chip` per Apple chip the service speaks of, each number a `Fact` with its source and its
provenance (docs/devices.md prints them all). The numbers the research could not find measured
on a chip are carried over from the closest measured chip of the same ANE generation
(`chip-families`: A15 ~ M2, A16 ~ M3, A17 Pro and A18 ~ M4, A19 Pro ~ M5), and say so.

Why these quantities: a program's time on the ANE is a fixed dispatch floor plus the larger of
its compute time (FLOPs over the fp16 peak, scaled by a utilisation ramp) and its memory time
(bytes over the bandwidth the ANE itself sees, which is not the SoC's); whether it compiles at all
depends on the per-axis limit and the weight bytes one program may hold; whether a model fits
depends on the memory an app may use.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.devices.facts import Fact, assumed, carried, extrapolated, measured, specified

GB = 10**9
GiB = 1 << 30
MiB = 1 << 20

MAC, IPHONE = "mac", "iphone"


@dataclass(frozen=True)
class Chip:
    name: str  # lower case with dashes: "m1-max", "a18-pro"
    title: str  # "M1 Max"
    kind: str  # "mac" (Mac or iPad with an M chip) or "iphone"
    generation: str  # the ANE generation, named by its M chip: "m1" ... "m5"
    report_family: str  # the family the quantization reports name: "M1", "A17", ...
    peak_tflops: Fact[float]  # fp16, dense
    bandwidth_gbs: Fact[float]  # what the ANE streams at, GB/s
    floor_us: Fact[float]  # fixed cost of dispatching one program
    axis_max: Fact[int]  # the largest size of any tensor axis
    program_weight_bytes: Fact[int]  # weights one program may hold and still compile for the ANE
    working_set_bytes: Fact[int]  # on-chip SRAM: beyond it, throughput drops
    ram_bytes: Fact[int]  # the smallest memory the chip shipped with
    app_memory_share: Fact[float]  # the part of it an app may use
    streams_palettized: Fact[bool]  # reads LUT-compressed weights compressed (less bandwidth)
    streams_int8: Fact[bool]  # reads int8 weights as int8 (less bandwidth)

    @property
    def app_memory_bytes(self) -> int:
        return int(self.ram_bytes.value * self.app_memory_share.value)

    def facts(self) -> dict[str, Fact[object]]:
        return {name: value for name, value in vars(self).items() if isinstance(value, Fact)}

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "kind": self.kind,
            "generation": self.generation,
            "app_memory_bytes": self.app_memory_bytes,
            "facts": {name: fact.to_json() for name, fact in self.facts().items()},
        }


# -- facts measured or specified on one chip, carried to the others -----------------------------

_FLOOR_M1 = measured(220, "aneforge-cost", "the M1 anchor of a silicon-anchored cost model")
_FLOOR_M4 = measured(95, "maderix-m4", "XPC + IOKit per evaluation")
_FLOOR_M5 = measured(
    70,
    "maderix-m5",
    "one evaluation of a 256x256 conv; ANEForge's e5rt floor is ~70 us too (aneforge-paper)",
)
_SRAM_M4 = measured(32 * MiB, "maderix-m4")
_AXIS_16K = measured(16_384, "ane-guide", "width and height; channels take 65,536")
_AXIS_64K = 65_536
_MAC_PROGRAM = extrapolated(
    2 * GiB,
    "aneforge-llm",
    (),
    "measured on a Mac the source does not name; Anemll caps macOS weight "
    "files at ~2 GB too (anemll-convert)",
)
_IPHONE_PROGRAM = measured(
    1 * GiB,
    "coreml-llm",
    "a 1 GB int8 chunk runs on the ANE, a 2 GB fp16 "
    "one falls back to the GPU; Anemll caps iOS files at 1 GB "
    "(anemll-convert)",
)
_MAC_SHARE = measured(
    2 / 3,
    "exo-1672",
    "Metal's recommended working set, 10.67 of 16 GB on an M4; 65-75% elsewhere (sglang-29949)",
)
_IPHONE_SHARE = assumed(0.5, "iphone-app-share", "no public per-app limit")
_PALETTE_M1 = measured(True, "aneforge-cross-chip", "2.37x over fp16 on M1")
_PALETTE_M5 = measured(True, "aneforge-cross-chip", "1.6-1.8x over fp16 on M5")
_INT8_M1 = measured(False, "aneforge-cross-chip", "compiles, but no bandwidth gain on M1")
_INT8_M5 = measured(True, "aneforge-cross-chip", "1.6-1.8x over fp16 on M5")


def _bandwidth(name: str, gbs: float | None, basis: tuple[str, ...] = (), note: str = "") -> Fact:
    if gbs is not None and not basis:
        return measured(gbs, "anemll-bench")
    return extrapolated(gbs, "anemll-bench", basis, note)


def _rated(tops: float, int8: bool) -> Fact:
    """Apple's rating as fp16 TFLOP/s: from A17 Pro / M4 on the rating counts int8 at twice the
    fp16 rate (maderix measures 18.6 fp16 on the M4 rated 38)."""
    return specified(
        tops / 2 if int8 else tops,
        "apple-rated",
        f"rated {tops:g} TOPS (int8), halved" if int8 else f"rated {tops:g} TOPS",
    )


def _chip(
    name: str,
    title: str,
    kind: str,
    generation: str,
    family: str,
    *,
    peak: Fact,
    bandwidth: Fact,
    floor: Fact,
    ram_gb: float,
    ram: Fact | None = None,
) -> Chip:
    """A chip whose generation-wide facts come from the generation's measured chip."""
    older_axis = generation in ("m1", "m2")
    if name == "m1":
        axis = _AXIS_16K
    elif older_axis:
        axis = carried(_AXIS_16K, ("m1",), "A13-A15-class generations (aneforge-cross-chip)")
    else:
        axis = extrapolated(
            _AXIS_64K,
            "aneforge-cross-chip",
            ("m1",),
            "M1's channel limit holds for every axis from A16 on",
        )
    if kind == MAC:
        program, share = (
            _MAC_PROGRAM,
            (_MAC_SHARE if name == "m4" else carried(_MAC_SHARE, ("m4",))),
        )
    else:
        program = _IPHONE_PROGRAM if name == "a19-pro" else carried(_IPHONE_PROGRAM, ("a19-pro",))
        share = _IPHONE_SHARE
    palette = {"m1": _PALETTE_M1, "m5": _PALETTE_M5}.get(name) or carried(
        _PALETTE_M1, ("m1", "m5"), "streams from M1 on: 2.37x over fp16 on M1, 1.6-1.8x on M5"
    )
    if name == "m1":
        int8 = _INT8_M1
    elif name == "m5":
        int8 = _INT8_M5
    elif generation == "m1":
        int8 = carried(_INT8_M1, ("m1",))
    else:
        int8 = carried(_INT8_M5, ("m5",), "streams from M2 on (aneforge-cross-chip)")
    return Chip(
        name,
        title,
        kind,
        generation,
        family,
        peak,
        bandwidth,
        floor,
        axis,
        program,
        _SRAM_M4 if name == "m4" else carried(_SRAM_M4, ("m4",)),
        ram or specified(int(ram_gb * GB), "apple-specs"),
        share,
        palette,
        int8,
    )


def _floor(generation: str, name: str) -> Fact:
    fact, anchor = {
        "m1": (_FLOOR_M1, "m1"),
        "m2": (_FLOOR_M1, "m1"),
        "m3": (_FLOOR_M1, "m1"),
        "m4": (_FLOOR_M4, "m4"),
        "m5": (_FLOOR_M5, "m5"),
    }[generation]
    if name == anchor:
        return fact
    note = (
        "M2 and M3 ANE clocks are unpublished: the M1 floor is kept as the conservative bound"
        if generation in ("m2", "m3")
        else "same ANE generation"
    )
    return carried(fact, (anchor,), note)


def _m(
    name,
    title,
    generation,
    tops,
    gbs,
    ram_gb,
    *,
    int8_rating=False,
    bandwidth=None,
    peak=None,
    ram=None,
) -> Chip:
    return _chip(
        name,
        title,
        MAC,
        generation,
        generation.upper(),
        peak=peak or _rated(tops, int8_rating),
        bandwidth=bandwidth or _bandwidth(name, gbs),
        floor=_floor(generation, name),
        ram_gb=ram_gb,
        ram=ram,
    )


def _a(name, title, generation, family, tops, ram_gb, *, int8_rating=False, peak=None) -> Chip:
    like = {"m2": "m2", "m3": "m3", "m4": "m4", "m5": "m5"}[generation]
    gbs = {"m2": 60, "m3": 63, "m4": 64, "m5": 70}[generation]
    bandwidth = extrapolated(
        gbs,
        "anemll-bench",
        (like,),
        f"the same ANE generation as {like.upper()} (chip-families); the "
        "phone's DRAM may cap it lower",
    )
    return _chip(
        name,
        title,
        IPHONE,
        generation,
        family,
        peak=peak or _rated(tops, int8_rating),
        bandwidth=bandwidth,
        floor=_floor(generation, name),
        ram_gb=ram_gb,
    )


_M5_PEAK = extrapolated(19.0, "apple-rated", ("m4",), "Apple has not restated the M5's rating")
_A19_PEAK = extrapolated(17.5, "apple-rated", ("a18-pro",), "Apple has not restated the rating")

CHIPS: tuple[Chip, ...] = (
    _m("m1", "M1", "m1", 11, 61, 8),
    _m("m1-pro", "M1 Pro", "m1", 11, 55, 16),
    _m("m1-max", "M1 Max", "m1", 11, 55, 32),
    _m("m2", "M2", "m2", 15.8, 60, 8),
    _m("m2-pro", "M2 Pro", "m2", 15.8, 62, 16),
    _m("m2-max", "M2 Max", "m2", 15.8, 62, 32),
    _m("m3", "M3", "m3", 18, 63, 8),
    _m(
        "m3-pro",
        "M3 Pro",
        "m3",
        18,
        None,
        18,
        bandwidth=_bandwidth(
            "m3-pro", 63, ("m3", "m2-pro"), "Pro parts saw the base chip's figure before M4 Pro"
        ),
    ),
    _m("m3-max", "M3 Max", "m3", 18, 120, 36),
    _m("m4", "M4", "m4", 38, 64, 8, int8_rating=True),
    _m("m4-pro", "M4 Pro", "m4", 38, 126, 24, int8_rating=True),
    _m("m4-max", "M4 Max", "m4", 38, 119, 36, int8_rating=True),
    _m("m5", "M5", "m5", 0, 70, 12, peak=_M5_PEAK),
    _m(
        "m5-pro",
        "M5 Pro",
        "m5",
        0,
        None,
        24,
        peak=_M5_PEAK,
        bandwidth=_bandwidth(
            "m5-pro", 148, ("m5-max", "m4-pro"), "from M4 on, Pro parts see the Max figure"
        ),
        ram=extrapolated(24 * GB, "apple-specs", ("m4-pro",)),
    ),
    _m(
        "m5-max",
        "M5 Max",
        "m5",
        0,
        148,
        36,
        peak=_M5_PEAK,
        ram=extrapolated(36 * GB, "apple-specs", ("m4-max",)),
    ),
    _a("a15", "A15 Bionic", "m2", "A15", 15.8, 4),
    _a("a16", "A16 Bionic", "m3", "A16", 17, 6),
    _a("a17-pro", "A17 Pro", "m4", "A17", 35, 8, int8_rating=True),
    _a("a18", "A18", "m4", "A18", 35, 8, int8_rating=True),
    _a("a18-pro", "A18 Pro", "m4", "A18", 35, 8, int8_rating=True),
    _a("a19-pro", "A19 Pro", "m5", "A19", 0, 12, peak=_A19_PEAK),
)

CHIPS_BY_NAME: dict[str, Chip] = {c.name: c for c in CHIPS}
REPORT_FAMILIES: tuple[str, ...] = tuple(sorted({c.report_family for c in CHIPS}))
# The chips Core AI compiles ahead of time for (`xcrun coreai-build compile`, one `.aimodelc`
# per chip): Apple Intelligence devices only, A17 Pro / M1 and newer. Every M chip qualifies;
# of the iPhone chips, those of the M4 generation and later (a15 and a16 do not).
COREAI_ARCHITECTURES: tuple[str, ...] = tuple(
    c.name for c in CHIPS if c.kind == MAC or c.generation >= "m4"
)


# -- limits every chip shares, read by the preflight ------------------------------------------

AXIS_MAX_ANY_CHIP = max(c.axis_max.value for c in CHIPS)
AXIS_MAX_EVERY_CHIP = min(c.axis_max.value for c in CHIPS)
# The most any chip's program may hold (a Mac's ~2 GB): past it every report expects a failure.
HARD_MAX_PROGRAM_WEIGHT_BYTES = max(c.program_weight_bytes.value for c in CHIPS)
# The default per-program weight budget: the smallest envelope in the table (an iPhone's 1 GiB),
# so that a default build compiles for every chip listed. A 1B-class decoder layer (~120 MB fp16)
# fits, which the old 8 MiB default (ironmill's sub-program report) refused.
DEFAULT_PROGRAM_WEIGHT_BYTES = min(c.program_weight_bytes.value for c in CHIPS)
