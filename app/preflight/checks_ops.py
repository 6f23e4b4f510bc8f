"""Op checks: ops the ANE lacks or is reported to fail on, compute dtype, and op spellings.

Each function is one rule of `rules.RULES`. What is known of each op (unsupported, reported
failing, disputed, and why, with its source; its traits: nonlinear, elementwise binary, needs an
epsilon) is its record in app/mil/ops; a finding cites the op's own source instead of the rule's
combined one.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.mil import DType, Operation, Var, ops
from app.mil.ops import AneStatus, Trait
from app.preflight.findings import Hit
from app.preflight.options import PreflightOptions
from app.preflight.view import ProgramView, const_value, is_const, shape_text

SDPA = "scaled_dot_product_attention"
SDPA_MAX_SEQ = 2048
SDPA_MIN_SEQ_BOUND = 512
REJECTED_COMPUTE_DTYPES = (DType.FP32, DType.INT32)


def _of(view: ProgramView, names: list[str]) -> Iterator[Operation]:
    """The ops of these types (none when no record has the fact: `view.ops()` is every op)."""
    return view.ops(*names) if names else iter(())


def _reported(view: ProgramView, status: AneStatus) -> Iterator[Hit]:
    for op in _of(view, [r.name for r in ops.records() if r.ane.status is status]):
        record = ops.get(op.type)
        assert record is not None
        yield Hit(op, f"{op.type} {op.name!r}: {record.ane.reason}", record.ane.source)


def unsupported_op(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Ops the ANE backend does not implement: ANEForge's capability census (gather, cumsum,
    reduce_prod; tmc agrees on reduce_prod). No report contradicts them: an error. (ironmill also
    calls `reciprocal` unsupported, but that is not a MIL op name; MIL's `inverse` falls under
    the epsilon rule.)"""
    yield from _reported(view, AneStatus.UNSUPPORTED)


def reported_failing_op(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Ops a single project reports failing, without chip or error detail (gelu: Orion;
    layer_norm: ANEForge, chip- and value-dependent): a warning, since one report from one
    setup is not enough to refuse a program."""
    yield from _reported(view, AneStatus.REPORTED_FAILING)


def disputed_op(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Ops Espresso lists as missing but other projects run (reduce_mean in tmc's on-device
    RMSNorm; rsqrt in ironmill with an epsilon). The running evidence is direct, the missing
    list is not, so this is advice: the finding names the fallback spelling."""
    yield from _reported(view, AneStatus.DISPUTED)


def epsilon_missing(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """rsqrt, log and inverse without an explicit epsilon: ironmill's op support matrix says
    the ANE needs one. One project, no contrary report: a warning."""
    for op in _of(view, ops.having(Trait.NEEDS_EPSILON)):
        if "epsilon" not in op.inputs:
            yield Hit(
                op,
                f"{op.type} {op.name!r} has no epsilon; ironmill reports the ANE needs an "
                "explicit one for rsqrt, log and inverse: pass epsilon explicitly (in fp16 "
                "anything below about 6.1e-5, the smallest normal value, loses precision)",
            )


def compute_dtype(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """An op computing in fp32 or int32. ANEForge's capability census rejects fp32, int32 and
    bf16 compute ("not implemented on any backend"); but tmc/apple's on-device compile test
    (x/ane/mil/mil_compile_test.go, read directly, not in the research notes) compiles and
    evaluates GenConvFP32, the fp32 conv the catalog's weight_dtype=fp32 follows. Conflicting,
    so a warning."""
    for op in view.ops():
        if op.type == "cast":
            continue
        for out in op.outputs:
            if out.tensor.dtype in REJECTED_COMPUTE_DTYPES:
                yield Hit(
                    op,
                    f"{op.type} {op.name!r} computes in {out.tensor.dtype.value}; ANEForge "
                    "reports the ANE computes in fp16 only (fp32, int32 and bf16 compute "
                    "rejected): cast to fp16 before the op, keeping fp32 only at the I/O",
                )
                break


def sdpa_attn_mask(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """scaled_dot_product_attention with attn_mask: the hardware ignores the mask (maderix
    README "Limitations", probed with inline, BLOBFILE and runtime masks in
    training/test_ane_sdpa5.m; Orion agrees). The program compiles and computes unmasked
    attention, silently wrong: an error."""
    for op in view.ops(SDPA):
        if "attn_mask" in op.inputs:
            mask = op.inputs["attn_mask"]
            shape = shape_text(mask.tensor.shape) if isinstance(mask, Var) else "?"
            yield Hit(
                op,
                f"{op.name!r} passes an attn_mask {shape}, which the ANE ignores (the result is "
                "unmasked attention): spell it as matmul(transpose_y) -> add(mask) -> "
                "softmax -> matmul, as the catalog's causal sdpa does",
            )


def sdpa_scale_argument(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """scaled_dot_product_attention with a `scale` argument: the ios18 op has none, and tmc
    reports the ANE compiler rejects the whole program when one is passed: an error."""
    for op in view.ops(SDPA):
        if "scale" in op.inputs:
            yield Hit(
                op,
                f"{op.name!r} passes a scale argument; the iOS18 op has none and the ANE "
                "compiler rejects the program: multiply the query by scale*sqrt(head_dim) "
                "before the op instead",
            )


def sdpa_native_size(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Native SDPA beyond the sizes ANEForge found reliable (sequence <= 2048 and
    min(query, key length) < 512). One project's reliability note: a warning."""
    for op in view.ops(SDPA):
        query, key = op.inputs["query"], op.inputs["key"]
        assert isinstance(query, Var) and isinstance(key, Var)
        q_len, k_len = query.tensor.shape[-2], key.tensor.shape[-2]
        if max(q_len, k_len) > SDPA_MAX_SEQ or min(q_len, k_len) >= SDPA_MIN_SEQ_BOUND:
            yield Hit(
                op,
                f"{op.name!r} attends {q_len} queries over {k_len} keys; ANEForge finds the "
                f"native SDPA reliable only for lengths <= {SDPA_MAX_SEQ} with min(query, key) "
                f"< {SDPA_MIN_SEQ_BOUND}: decompose it (matmul -> softmax -> matmul) or tile "
                "the queries",
            )


def square_before_nonlinearity(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """square feeding a nonlinearity when its width W has W % 128 > 64: ANEForge reports the
    fused pair failing to compile and writes mul(x, x) instead (`_compile.py` `_e_square`).
    Whether the compiler fuses depends on more than this program shows: a warning."""
    for op in view.ops("square"):
        out = op.outputs[0]
        width = out.tensor.shape[-1] if out.tensor.shape else 1
        nonlinear = [c for c in view.consumers(out) if ops.has(c.type, Trait.NONLINEAR)]
        if nonlinear and width % 128 > 64:
            yield Hit(
                op,
                f"square {op.name!r} (width {width}, {width} % 128 = {width % 128} > 64) feeds "
                f"{nonlinear[0].type} {nonlinear[0].name!r}; ANEForge reports this fusion "
                "failing to compile: write mul(x = a, y = a) instead of square",
            )


def concat_arity(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """concat of more than two values. The reports conflict: ANEForge says concat takes exactly
    two inputs and Orion that concat is rejected, while Espresso concatenates 12+ inputs and
    tmc uses a 3-way concat. Conservative reading, as a warning: more than two may fail."""
    for op in view.ops("concat"):
        values = op.inputs["values"]
        count = len(values) if isinstance(values, tuple) else 1
        if count > 2:
            yield Hit(
                op,
                f"concat {op.name!r} joins {count} values; ANEForge reports concat taking "
                "exactly 2 inputs (Orion: concat rejected; Espresso and tmc: 3 to 12+ work): "
                "chain 2-input concats, or return the parts as separate outputs",
            )


def softmax_power_of_two(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """softmax over an axis whose size is not a power of two: Espresso reports softmax needs
    power-of-2 dims. One project, no chip given: a warning."""
    for op in view.ops("softmax"):
        x = op.inputs["x"]
        assert isinstance(x, Var)
        if not x.tensor.shape:
            continue
        axis = const_value(op.inputs.get("axis"), -1) % x.tensor.rank
        size = x.tensor.shape[axis]
        if size & (size - 1):
            yield Hit(
                op,
                f"softmax {op.name!r} runs over axis {axis} of size {size}, not a power of two; "
                f"Espresso reports softmax needs power-of-2 sizes: pad the axis to "
                f"{1 << size.bit_length()} with -65504 (exp gives 0) if the compile fails",
            )


def broadcast_const_shape(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """An elementwise op broadcasting a const shaped [C] (rank 1 against a higher rank) or
    [1, 1, 1, S] across channels: tmc reports both make the ANE compiler reject the whole
    program ("load-bearing" comments in mil.go@1565d2c8). No contrary report: an error."""
    for op in _of(view, ops.having(Trait.ELEMENTWISE, Trait.BINARY)):
        x, y = op.inputs.get("x"), op.inputs.get("y")
        if not (isinstance(x, Var) and isinstance(y, Var)):
            continue
        for const, other in ((x, y), (y, x)):
            if not is_const(const) or const.tensor.size <= 1:
                continue
            c, o = const.tensor.shape, other.tensor.shape
            rank1 = len(c) == 1 and len(o) > 1
            row = len(c) == 4 and len(o) == 4 and c[:3] == (1, 1, 1) and o[1] > 1
            if rank1 or row:
                yield Hit(
                    op,
                    f"{op.type} {op.name!r} broadcasts const {const.name!r} "
                    f"{shape_text(c)} over {shape_text(o)}; the ANE compiler rejects "
                    "rank-1 [C] and [1, 1, 1, S] broadcast weights: store it as [1, C, 1, 1] "
                    "(or at the full shape)",
                )
                break


def blockwise_feeds_matmul(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """constexpr_blockwise_shift_scale output used directly as a conv or matmul operand:
    "not routable" on the ANE (Espresso: not implemented); ANEForge bridges it with a `+0`,
    which makes the weight dense again (no bandwidth gain). A workaround exists: a warning."""
    for op in view.ops("constexpr_blockwise_shift_scale"):
        for out in op.outputs:
            users = [c for c in view.consumers(out) if c.type in ("conv", "matmul")]
            if users:
                yield Hit(
                    op,
                    f"{op.name!r} (constexpr_blockwise_shift_scale) feeds {users[0].type} "
                    f"{users[0].name!r} directly, which is reported not routable to the ANE: "
                    "use per-channel constexpr_affine_dequantize or a palette, or accept "
                    "ANEForge's add(+0) bridge (the weight is then dense in memory)",
                )


def lut_reshaped(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """constexpr_lut_to_dense output reshaped: ANEForge reports a reshape of a constexpr output
    "not routable"; the indices must keep the weight's rank. One project: a warning."""
    for op in view.ops("constexpr_lut_to_dense"):
        for out in op.outputs:
            users = [c for c in view.consumers(out) if c.type == "reshape"]
            if users:
                wanted = shape_text(users[0].outputs[0].tensor.shape)
                yield Hit(
                    op,
                    f"{op.name!r} (constexpr_lut_to_dense, {shape_text(out.tensor.shape)}) is "
                    f"reshaped to {wanted} by {users[0].name!r}; ANEForge reports a reshaped "
                    f"constexpr output not routable to the ANE: build the indices as {wanted}, "
                    "the weight's own shape, so no reshape is needed",
                )
