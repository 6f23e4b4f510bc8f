"""What the field reports for each quantization format, chip family and path: the device table's
quantization-support part (app/preflight reads it to warn; the estimates read which chips stream a
format compressed from `table.Chip.streams_*`).

Each row of `REPORTS` is one public report, read from fused-quantized-mlmodelc.md §3 (and
mil-text-and-blob.md §(e)): which formats it covers, on which chip families and which path
("coreml": Core ML placing the model; "ane-direct": the private in-memory / e5rt compile), what
it found, and where. Statuses:

- ``works``: compiles and runs on the ANE (at the speed the note gives where one was measured);
- ``slower``: runs, but measured slower than fp16, or without the speed-up the format exists for;
- ``reported-failing``: a compile failure, a crash, a fallback off the ANE, or wrong output.

The reports conflict chip by chip; nothing is averaged away. Where a report names a chip
ambiguously (ironmill's "h14g", which it calls M3 Pro and ANEForge maps to M2), the row covers
both families.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from app.devices.table import REPORT_FAMILIES


class QuantFormatLike(Protocol):
    """What a report matches against (app.preflight.quant_config.QuantFormat)."""

    @property
    def mode(self) -> str: ...
    @property
    def nbits(self) -> int | None: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def granularity(self) -> str | None: ...
    @property
    def op(self) -> str: ...
    @property
    def group_size(self) -> int | None: ...


# The families the reports may name: every family of the device table.
CHIP_FAMILIES = REPORT_FAMILIES
PATHS = ("coreml", "ane-direct")
ANY = "any"
_M_ALL = ("M1", "M2", "M3", "M4", "M5")
_F31 = "fused-quantized-mlmodelc.md §3.1"
_F32 = "fused-quantized-mlmodelc.md §3.2"
# Where no row covers a case: the survey's own conclusion that placement and accuracy must then be
# checked (ANEForge gates accuracy, MLComputePlan reports placement).
NO_REPORT_SOURCE = (
    "fused-quantized-mlmodelc.md §3.2 (takeaway); sbryngelson/ANEForge compress_atol gate, "
    "apple/coremltools MLComputePlan placement"
)
_AFFINE = "constexpr_affine_dequantize"
_BLOCKWISE = "constexpr_blockwise_shift_scale"
_INT8 = ("int8",)
_8BIT = ("int8", "uint8")
_4BIT = ("int4", "uint4")


class Status(StrEnum):
    WORKS = "works"
    SLOWER = "slower"
    REPORTED_FAILING = "reported-failing"


RANK = {Status.WORKS: 0, Status.SLOWER: 1, Status.REPORTED_FAILING: 2}


@dataclass(frozen=True)
class Formats:
    """Which formats a report covers; None means any value of that field."""

    mode: str
    nbits: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    granularity: str | None = None
    op: str | None = None
    group_size_below: int | None = None

    def matches(self, f: QuantFormatLike) -> bool:
        return (
            f.mode == self.mode
            and (self.nbits is None or f.nbits in self.nbits)
            and (self.dtypes is None or f.dtype in self.dtypes)
            and (self.granularity is None or f.granularity == self.granularity)
            and (self.op is None or f.op == self.op)
            and (
                self.group_size_below is None
                or (f.group_size is not None and f.group_size < self.group_size_below)
            )
        )

    def describe(self) -> str:
        parts = [self.mode]
        if self.nbits:
            parts.append("/".join(map(str, self.nbits)) + "-bit")
        if self.dtypes:
            parts.append("/".join(self.dtypes))
        if self.granularity:
            parts.append(self.granularity)
        if self.group_size_below:
            parts.append(f"group_size < {self.group_size_below}")
        if self.op:
            parts.append(f"as {self.op}")
        return " ".join(parts)


@dataclass(frozen=True)
class QuantReport:
    formats: Formats
    families: tuple[str, ...] | None  # None: the report holds on any chip (or names none)
    path: str
    status: Status
    note: str  # what was reported, with its numbers
    source: str

    def covers(self, chip: str) -> bool:
        return chip == ANY or self.families is None or chip in self.families

    def chips(self) -> str:
        return ", ".join(self.families) if self.families else "any chip"


W, S, F = Status.WORKS, Status.SLOWER, Status.REPORTED_FAILING
REPORTS: tuple[QuantReport, ...] = (
    # -- ANE-direct path (private in-memory compile, e5rt) --------------------------------------
    QuantReport(
        Formats("linear", dtypes=_INT8, granularity="per_channel", op=_AFFINE),
        ("M4",),
        "ane-direct",
        W,
        "W8A8 (quantize/dequantize between layers): 35.1 TOPS vs 18.6 fp16 (1.88x), 128 convs "
        "of 512 channels",
        f"{_F31}; maderix/ANE README.md, ane_int8_bench.m @20cd236",
    ),
    QuantReport(
        Formats("linear", dtypes=_8BIT),
        ("M3",),
        "ane-direct",
        F,
        "constexpr_affine_dequantize and cast uint8->fp16 fail with InvalidMILProgram, "
        "'fp16 only' (M3 Max, macOS 15)",
        f"{_F31}; christopherkarani/Espresso docs/reverse-engineering-apple-neural-engine.html",
    ),
    QuantReport(
        Formats("linear", dtypes=_4BIT),
        ("M2", "M3"),
        "ane-direct",
        F,
        "INT4/UINT4 'comprehensively rejected' (inputs, casts, consts, constexpr_lut_to_dense, "
        "constexpr_blockwise_shift_scale) on h14g, which ironmill calls M3 Pro and ANEForge M2",
        f"{_F31}; jafreck/ironmill ane-constraints.md, ane-runtime-behavior.md",
    ),
    QuantReport(
        Formats("palettize", nbits=(4,)),
        ("M2", "M3"),
        "ane-direct",
        F,
        "4-bit LUT indices are uint4, 'comprehensively rejected' on h14g (ironmill: M3 Pro; "
        "ANEForge: M2)",
        f"{_F31}; jafreck/ironmill ane-constraints.md, ane-runtime-behavior.md",
    ),
    QuantReport(
        Formats("palettize", nbits=(4,)),
        _M_ALL,
        "ane-direct",
        W,
        "compiles and streams natively (dequantised during DMA): 2.37x on M1, 1.6-1.8x on M5 "
        "(ANEForge: M3 and later stream it; measured on M5)",
        f"{_F31}; sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md",
    ),
    QuantReport(
        Formats("prune"),
        _M_ALL,
        "ane-direct",
        W,
        "sparse weights compile and stream natively from M1 on (measured on M1, M2, M5)",
        f"{_F31}; sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md",
    ),
    QuantReport(
        Formats("linear", dtypes=_INT8, op=_AFFINE),
        ("M1",),
        "ane-direct",
        S,
        "int8-affine compiles but M1 does not stream it: no bandwidth gain over fp16",
        f"{_F31}; sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md",
    ),
    QuantReport(
        Formats("linear", dtypes=_INT8, op=_AFFINE),
        ("M2", "M3", "M4", "M5"),
        "ane-direct",
        W,
        "int8-affine compiles and streams natively from M2 on (1.6-1.8x measured on M5)",
        f"{_F31}; sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md",
    ),
    QuantReport(
        Formats("linear", op=_BLOCKWISE),
        ("M1", "M2"),
        "ane-direct",
        S,
        "blockwise compiles but is not streamed (on M2 it folds to fp16): no bandwidth gain",
        f"{_F31}; sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md",
    ),
    QuantReport(
        Formats("linear", op=_BLOCKWISE),
        ("M3", "M4", "M5"),
        "ane-direct",
        W,
        "blockwise streams natively from M3 on (1.6-1.8x measured on M5)",
        f"{_F31}; sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md",
    ),
    QuantReport(
        Formats("linear", op=_BLOCKWISE),
        None,
        "ane-direct",
        F,
        "constexpr_blockwise_shift_scale is 'not routable' as a conv/matmul weight (Espresso: "
        "'Not implemented'); ANEForge's add(+0) bridge makes the weight dense, no bandwidth gain",
        f"{_F31}; sbryngelson/ANEForge docs/developer/compile-pipeline.md",
    ),
    QuantReport(
        Formats("linear", dtypes=_INT8, granularity="per_channel"),
        ("M5",),
        "ane-direct",
        F,
        "LLM decode with per-channel int8: speed about neutral (Qwen3-8B 7.9 vs 7.5 tok/s) and "
        "the 8B model's output 'collapses into repetition'",
        f"{_F31}; sbryngelson/ANEForge docs/llm.md",
    ),
    # -- Core ML path ---------------------------------------------------------------------------
    QuantReport(
        Formats("palettize", nbits=(4, 6)),
        None,
        "coreml",
        W,
        "4- and 6-bit LUT LLMs shipped for the ANE",
        f"{_F32}; Anemll/Anemll docs/convert.md",
    ),
    QuantReport(
        Formats("palettize", nbits=(6, 8)),
        None,
        "coreml",
        W,
        "6- and 8-bit palettized models shipped (KokoroNoise constexpr_lut_to_dense)",
        f"{_F32}; FluidInference/mobius, FluidInference/FluidAudio",
    ),
    QuantReport(
        Formats("palettize"),
        ("A18",),
        "coreml",
        W,
        "palettized weights on the ANE: cosine 0.9975 to the reference (iPhone 16 Pro Max, iOS 27)",
        f"{_F32}; apple/coreai-models #279",
    ),
    QuantReport(
        Formats("palettize", granularity="per_grouped_channel", group_size_below=8),
        None,
        "coreml",
        S,
        "grouped-channel LUTs slow down as the number of LUTs grows; group sizes 8-16 advised",
        f"{_F32}; apple/coremltools docs-guides/source/opt-palettization-perf.md",
    ),
    QuantReport(
        Formats("linear", granularity="per_block"),
        None,
        "coreml",
        F,
        "8-bit per-block int on the ANE gives silently wrong output: cosine 0.367 against 0.999 "
        "on the GPU (iPhone 16 Pro Max, iOS 27); read as any per-block int",
        f"{_F32}; apple/coreai-models #279",
    ),
    QuantReport(
        Formats("linear", dtypes=_4BIT, granularity="per_block"),
        None,
        "coreml",
        F,
        "a blockwise-INT4 static LLM crashes the compiler (SIGSEGV in anePreCompileBinary); "
        "the palettized model compiles",
        f"{_F32}; apple/coreai-models #55",
    ),
    QuantReport(
        Formats("linear", dtypes=_4BIT),
        None,
        "coreml",
        F,
        "the ANE compile fails with an empty ErrorList and exit 0, leaving a GPU-only model",
        f"{_F32}; apple/coreai-models #205",
    ),
    QuantReport(
        Formats("linear"),
        ("M4",),
        "coreml",
        F,
        "conv/linear/matmul with an int4 or int8 constexpr weight: MLComputePlan reports "
        "supported=[CPU]",
        f"{_F32}; kasper0406/stablehlo-coreml PR #110",
    ),
    QuantReport(
        Formats("linear", dtypes=_INT8, granularity="per_channel"),
        ("A16",),
        "coreml",
        W,
        "W8 weight-only ResNet50: 1.49 ms against 1.52 ms fp16",
        f"{_F32}; apple/coremltools docs-guides/source/opt-quantization-perf.md",
    ),
    QuantReport(
        Formats("linear", dtypes=_INT8, granularity="per_channel"),
        ("A17",),
        "coreml",
        S,
        "W8 weight-only ResNet50: 1.50 ms against 1.38 ms fp16 (A17 Pro); W8A8 is the fast int8 "
        "path there (0.77 ms)",
        f"{_F32}; apple/coremltools docs-guides/source/opt-quantization-perf.md",
    ),
    QuantReport(
        Formats("linear", dtypes=_4BIT, granularity="per_block"),
        None,
        "coreml",
        S,
        "4-bit per-block gains latency on the GPU; on the Neural Engine coremltools advises "
        "per-channel scales",
        f"{_F32}; apple/coremltools docs-guides/source/opt-quantization-perf.md",
    ),
    QuantReport(
        Formats("linear", op=_BLOCKWISE),
        None,
        "coreml",
        F,
        "constexpr_blockwise_shift_scale is listed among non-ANE ops; a palette with "
        "per_channel_scale, which wraps it, fails MPSGraph verification on the ANE (macOS 26)",
        f"{_F32}; pytorch/executorch PR #19252, apple/coremltools PR #2688",
    ),
)
