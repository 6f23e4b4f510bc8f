"""The rule table, the runner, and the table as Markdown.

One row per rule: a stable id, its severity, what it checks, where the limit was reported (the
research section in ../shared/research/ and the public project, file or issue it cites) and the
check function (whose docstring says how conflicting reports were read). The quantization rules
have no program check: `quantization.quantization_findings` emits them from its own table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.mil import Program
from app.preflight import checks_io as io
from app.preflight import checks_ops as ops
from app.preflight import checks_program as prog
from app.preflight import checks_shapes as shapes
from app.preflight.findings import Finding, Hit, Severity
from app.preflight.options import PreflightOptions
from app.preflight.view import ProgramView

Check = Callable[[ProgramView, PreflightOptions], Iterable[Hit]]

ERROR, WARNING, ADVICE = Severity.ERROR, Severity.WARNING, Severity.ADVICE
_E = "mil-text-and-blob.md §(e)"
_B6 = "mil-text-and-blob.md §(b.6)"
_F24 = "fused-quantized-mlmodelc.md §2.4"
_F3 = "fused-quantized-mlmodelc.md §3"


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    what: str
    source: str
    check: Check | None


RULES: tuple[Rule, ...] = (
    # -- shapes ---------------------------------------------------------------------------------
    Rule(
        "rank.core-ml-max",
        ERROR,
        "a tensor of rank > 5 (consts read only by constexpr ops excepted)",
        "coremltools-linux.md §4b; apple/coremltools _check_early_error_out_for_invalid_program, "
        "_check_invalid_tensor_rank "
        "(also fused-quantized-mlmodelc.md §5.4: apple/coremltools #1330, #1723, #2291)",
        shapes.rank_over_core_ml_max,
    ),
    Rule(
        "rank.ane-4d",
        WARNING,
        "a tensor of rank 5 (the ANE works in rank 4; constexpr-only consts excepted)",
        f"{_E}; sbryngelson/ANEForge 'rank4 cap' (and {_F24}: op-quirks.md, rank <= 5)",
        shapes.rank_five,
    ),
    Rule(
        "axis.max-any-chip",
        ERROR,
        "an axis larger than 65,536",
        f"{_E}; sbryngelson/ANEForge group_norm_large_featuremap, cross-chip.md "
        "(jafreck/ironmill ane-constraints.md: 16,384)",
        shapes.axis_over_any_chip,
    ),
    Rule(
        "axis.max-older-chips",
        WARNING,
        "an axis larger than 16,384 (and at most 65,536)",
        f"{_E}; jafreck/ironmill docs/design/ane-constraints.md "
        f"({_F24}: sbryngelson/ANEForge op-quirks.md, cross-chip.md, A13-A15 16,384)",
        shapes.axis_over_older_chips,
    ),
    Rule(
        "conv.kernel-max",
        ERROR,
        "a conv kernel side larger than 16",
        f"{_E}; jafreck/ironmill docs/design/ane-constraints.md (16x16), "
        "sbryngelson/ANEForge (15 on M5)",
        shapes.conv_kernel_over_any_chip,
    ),
    Rule(
        "conv.kernel-chip",
        WARNING,
        "a conv kernel side of 14 to 16",
        f"{_F24}; sbryngelson/ANEForge op-quirks.md, cross-chip.md (kW <= 13 M1, <= 15 M5)",
        shapes.conv_kernel_chip_dependent,
    ),
    # -- ops ------------------------------------------------------------------------------------
    Rule(
        "op.unsupported",
        ERROR,
        "an op the ANE does not implement (gather, cumsum, reduce_prod)",
        f"{_E}; sbryngelson/ANEForge aneforge/_capabilities.py, tmc/apple "
        "x/ane/mil/mil.go@1565d2c8",
        ops.unsupported_op,
    ),
    Rule(
        "op.reported-failing",
        WARNING,
        "an op one project reports failing (gelu, layer_norm)",
        f"{_F24}; mechramc/Orion (gelu), sbryngelson/ANEForge issue #149 (layer_norm)",
        ops.reported_failing_op,
    ),
    Rule(
        "op.disputed",
        ADVICE,
        "an op listed missing by one project, run by another (reduce_mean, rsqrt)",
        f"{_F24}; christopherkarani/Espresso vs tmc/apple rmsnorm_test.go, jafreck/ironmill",
        ops.disputed_op,
    ),
    Rule(
        "op.epsilon",
        WARNING,
        "rsqrt, log or inverse without an explicit epsilon",
        f"{_F24}; jafreck/ironmill ane-op-support-matrix.md",
        ops.epsilon_missing,
    ),
    Rule(
        "dtype.fp16-compute",
        WARNING,
        "an op (other than cast) computing in fp32 or int32",
        f"{_E}; sbryngelson/ANEForge aneforge/_capabilities.py _NEGATIVES "
        "(contra: tmc/apple x/ane/mil/mil_compile_test.go GenConvFP32)",
        ops.compute_dtype,
    ),
    Rule(
        "sdpa.attn-mask",
        ERROR,
        "scaled_dot_product_attention with attn_mask (ignored)",
        f"{_E}, {_B6}; maderix/ANE README 'Limitations', training/test_ane_sdpa5.m "
        f"({_F24}: mechramc/Orion)",
        ops.sdpa_attn_mask,
    ),
    Rule(
        "sdpa.scale-arg",
        ERROR,
        "scaled_dot_product_attention with a scale argument",
        f"{_E}, {_B6}; tmc/apple x/ane/mil/mil.go@1565d2c8",
        ops.sdpa_scale_argument,
    ),
    Rule(
        "sdpa.native-size",
        WARNING,
        "native SDPA with a length > 2048 or min(q, k) >= 512",
        f"{_F24}; sbryngelson/ANEForge op-quirks.md",
        ops.sdpa_native_size,
    ),
    Rule(
        "square.fused-nonlinearity",
        WARNING,
        "square feeding a nonlinearity with width % 128 > 64",
        f"{_E}; sbryngelson/ANEForge _compile.py _e_square",
        ops.square_before_nonlinearity,
    ),
    Rule(
        "concat.arity",
        WARNING,
        "concat of more than 2 values",
        f"{_F24}; sbryngelson/ANEForge (exactly 2), mechramc/Orion (rejected), "
        "christopherkarani/Espresso (12+ work)",
        ops.concat_arity,
    ),
    Rule(
        "softmax.pow2",
        WARNING,
        "softmax over an axis whose size is not a power of two",
        f"{_F24}; christopherkarani/Espresso",
        ops.softmax_power_of_two,
    ),
    Rule(
        "broadcast.const-shape",
        ERROR,
        "an elementwise op broadcasting a [C] or [1, 1, 1, S] const",
        f"{_E}, {_B6}; tmc/apple x/ane/mil/mil.go@1565d2c8",
        ops.broadcast_const_shape,
    ),
    Rule(
        "constexpr.blockwise-direct",
        WARNING,
        "constexpr_blockwise_shift_scale feeding conv or matmul directly",
        f"{_E}, {_F3}.1; sbryngelson/ANEForge docs/developer/compile-pipeline.md "
        "(christopherkarani/Espresso: not implemented)",
        ops.blockwise_feeds_matmul,
    ),
    Rule(
        "constexpr.lut-reshape",
        WARNING,
        "constexpr_lut_to_dense output reshaped",
        f"{_F3}.1; sbryngelson/ANEForge docs/developer/compile-pipeline.md",
        ops.lut_reshaped,
    ),
    # -- I/O, states, runtime operands -----------------------------------------------------------
    Rule(
        "io.surface-min",
        WARNING,
        "an input/output below the minimum IOSurface size",
        f"{_E}, {_F24}; jafreck/ironmill ane-constraints.md (16 KB), mechramc/Orion "
        "docs/ane_constraints.md (~49,152 B)",
        io.surface_minimum,
    ),
    Rule(
        "io.wide-short",
        WARNING,
        "an input/output [1, C, 1, S] with C > ~768 and S < 32",
        f"{_E}; jafreck/ironmill docs/design/ane-constraints.md",
        io.wide_short_io,
    ),
    Rule(
        "io.channel-align",
        ADVICE,
        "input/output channels not a multiple of 32",
        f"{_E}; jafreck/ironmill docs/design/ane-constraints.md",
        io.channel_alignment,
    ),
    Rule(
        "io.width-align",
        WARNING,
        "input/output width S not a multiple of 16",
        f"{_F24}; ncdrone/rustane (contra: tmc/apple rmsnorm_test.go, S = 2)",
        io.width_alignment,
    ),
    Rule(
        "io.row-stride",
        ADVICE,
        "input/output rows shorter than the 64-byte surface stride",
        f"{_E}; tmc/apple x/ane/doc.go ({_F24}: mechramc/Orion, data read packed)",
        io.row_stride,
    ),
    Rule(
        "io.multi-input",
        ADVICE,
        "more than one tensor input",
        f"{_E}; maderix/ANE README 'Single-input constraint', jafreck/ironmill",
        io.multiple_inputs,
    ),
    Rule(
        "io.alphabetical",
        ADVICE,
        "inputs or outputs not declared in alphabetical order",
        f"{_F24}; mechramc/Orion docs/ane_constraints.md",
        io.alphabetical_binding,
    ),
    Rule(
        "io.uniform-size",
        ADVICE,
        "inputs/outputs of different byte sizes",
        f"{_F24}; mechramc/Orion docs/ane_constraints.md",
        io.uniform_surface_sizes,
    ),
    Rule(
        "io.dtype",
        WARNING,
        "an input/output that is neither fp16 nor fp32",
        f"{_F3}.1; jafreck/ironmill ane-constraints.md (int8 outputs rejected)",
        io.io_dtype,
    ),
    Rule(
        "io.fp32",
        ADVICE,
        "fp32 input/output (fp16 I/O is faster)",
        f"{_E}; maderix/ANE README 'How It Works'",
        io.io_fp32,
    ),
    Rule(
        "state.ane-direct",
        WARNING,
        "a state parameter",
        f"{_E}; tmc/apple x/ane/mil/mil.go@1565d2c8, state_test.go "
        "(fused-quantized-mlmodelc.md §5.3: apple/coremltools #2553)",
        io.state_on_ane_direct,
    ),
    Rule(
        "state.align-32",
        WARNING,
        "a state whose last axis is not a multiple of 32",
        "fused-quantized-mlmodelc.md §5.3; apple/coremltools #2631",
        io.state_alignment,
    ),
    Rule(
        "matmul.runtime-inner-32",
        WARNING,
        "a matmul of two runtime operands with inner dimension not a multiple of 32",
        "fused-quantized-mlmodelc.md §2.3; maderix/ANE issue #47",
        io.runtime_matmul_inner,
    ),
    # -- program-wide ---------------------------------------------------------------------------
    Rule(
        "weights.budget",
        WARNING,
        "weight bytes over the configured budget (default 1 GiB)",
        f"{_E}, {_F24}; john-rocky/CoreML-LLM v1.1.0 (1 GB on an iPhone), "
        "sbryngelson/ANEForge docs/llm.md (~2 GB on a Mac), jafreck/ironmill ane-constraints.md "
        "(~8 MB); docs/devices.md",
        prog.weights_over_budget,
    ),
    Rule(
        "weights.max",
        ERROR,
        "weight bytes over ~2 GB (2 GiB)",
        f"{_F24}; sbryngelson/ANEForge docs/llm.md, Anemll/Anemll docs/convert.md",
        prog.weights_over_hard_max,
    ),
    Rule(
        "sram.working-set",
        ADVICE,
        "an op moving more than ~32 MB of activations",
        f"{_F24}; maderix.substack.com/p/inside-the-m4-apple-neural-engine-615, "
        "christopherkarani/Espresso ANEValidationPass.swift",
        prog.working_set,
    ),
    Rule(
        "reduce.channel-sum",
        ADVICE,
        "reduce_sum/reduce_mean over more than 256 channels",
        f"{_B6}; sbryngelson/ANEForge _compile.py _e_rms_norm",
        prog.slow_channel_reduction,
    ),
    # -- quantization (emitted by quantization.quantization_findings) ---------------------------
    Rule(
        "quant.reported-failing",
        WARNING,
        "a quantization format reported failing for the chip and path",
        f"{_F3}.1-3.2 (one citation per row of the quantization table); maderix/ANE, "
        "christopherkarani/Espresso, jafreck/ironmill, sbryngelson/ANEForge, apple/coreai-models "
        "#279 #55 #205, kasper0406/stablehlo-coreml PR #110, pytorch/executorch PR #19252",
        None,
    ),
    Rule(
        "quant.slower",
        WARNING,
        "a quantization format reported slower than fp16, or without its speed-up",
        f"{_F3}.1-3.2 (one citation per row of the quantization table); sbryngelson/ANEForge, "
        "apple/coremltools docs-guides opt-quantization-perf.md, opt-palettization-perf.md",
        None,
    ),
    Rule(
        "quant.no-report",
        ADVICE,
        "a quantization format with no public report for the chip and path",
        "fused-quantized-mlmodelc.md §3.2 (takeaway); sbryngelson/ANEForge compress_atol gate, "
        "apple/coremltools MLComputePlan placement",
        None,
    ),
)

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def preflight(program: Program, *, options: PreflightOptions | None = None) -> list[Finding]:
    """Check `program` against every rule; findings in program order (a function's inputs, then
    its ops; outputs at their producing op), then in rule-table order."""
    options = options or PreflightOptions()
    view = ProgramView(program)
    keyed: list[tuple[int, int, Finding]] = []
    for index, rule in enumerate(RULES):
        if rule.check is None:
            continue
        for hit in rule.check(view, options):
            finding = Finding(
                rule.id, rule.severity, hit.subject.name, hit.message, hit.source or rule.source
            )
            keyed.append((view.position(hit.subject), index, finding))
    keyed.sort(key=lambda k: (k[0], k[1], k[2].message))
    return [f for _, _, f in keyed]


def render_rules_markdown(rules: Iterable[Rule] = RULES) -> str:
    """The rule table of docs/preflight.md: id | severity | what | source."""
    lines = ["| id | severity | what | source |", "|---|---|---|---|"]
    for r in rules:
        cells = (f"`{r.id}`", r.severity.value, r.what, r.source)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
