"""Program-wide checks: weight bytes per program, on-chip working set, slow channel reductions.

Each function is one rule of `rules.RULES`.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.mil import Operation, Var
from app.preflight.findings import Hit
from app.preflight.options import HARD_MAX_PROGRAM_WEIGHT_BYTES as HARD_MAX
from app.preflight.options import PreflightOptions
from app.preflight.view import ProgramView, const_value, is_const, shape_text
from app.settings import MiB

SRAM_BYTES = 32 * MiB
SLOW_CHANNEL_REDUCTION = 256


def _weight_bytes(op: Operation) -> int:
    assert op.value is not None
    return op.value.type.size * op.value.type.dtype.numpy.itemsize


def _crossing(view: ProgramView, budget: int) -> tuple[Operation, int] | None:
    """The const whose bytes take the running total over `budget`, and the program's total.

    Counts every const that goes to weight.bin, at its stored dtype. Identical tensors are
    stored once in the file but counted at each use: whether the ANE compiler shares them is
    not reported, so the larger count is the safe one."""
    blob = view.program.blob_consts()
    total, crossing = 0, None
    for op in blob:
        total += _weight_bytes(op)
        if crossing is None and total > budget:
            crossing = op
    return (crossing, total) if crossing is not None else None


def weights_over_budget(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Weights above the configured budget (default: the device table's smallest envelope, an
    iPhone's 1 GiB; ironmill reports ~8 MB per sub-program, ANEForge ~2 GB per program on a Mac,
    so the reports conflict by two orders of magnitude): a warning (a caller may still refuse it,
    or split the graph, by its own setting)."""
    found = _crossing(view, options.max_program_weight_bytes)
    if found is not None and found[1] <= HARD_MAX:
        op, total = found
        yield Hit(
            op,
            f"the program holds {total:,} bytes of weights, over the budget of "
            f"{options.max_program_weight_bytes:,} (an iPhone's ANE takes ~1 GB per program, a "
            f"Mac's ~2 GB, ironmill reports ~8 MB); the total crosses it at const {op.name!r}: "
            "split the program there into a chain of programs",
        )


def weights_over_hard_max(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Weights above ~2 GB: the largest per-program figure any report gives (ANEForge ~2 GB of
    baked weights; Anemll: weight files ~2 GB on macOS, 1 GB on iOS). Every report expects a
    failure beyond it: an error."""
    found = _crossing(view, HARD_MAX)
    if found is not None:
        op, total = found
        yield Hit(
            op,
            f"the program holds {total:,} bytes of weights, over {HARD_MAX:,} (~2 GB, the most "
            f"any report compiles into one ANE program); the total crosses it at const "
            f"{op.name!r}: split the program there into a chain of programs",
        )


def _activation_bytes(value: Var | tuple[Var, ...]) -> int:
    """fp16 bytes of the non-const tensors (the ANE holds activations in fp16; weights are
    counted by the weight rules)."""
    vars_ = value if isinstance(value, tuple) else (value,)
    return sum(v.tensor.size * 2 for v in vars_ if not is_const(v))


def working_set(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """An op whose activations (inputs + outputs, in fp16) exceed the ~32 MB on-chip SRAM:
    maderix measures throughput dropping ~30% beyond it, and Espresso warns above 32 MB. A speed
    note: advice."""
    for op in view.ops():
        size = sum(_activation_bytes(v) for v in op.inputs.values()) + sum(
            _activation_bytes(v) for v in op.outputs
        )
        if size > SRAM_BYTES:
            yield Hit(
                op,
                f"{op.type} {op.name!r} moves {size:,} bytes of fp16 activations, more than the "
                f"~{SRAM_BYTES // MiB} MiB of on-chip SRAM (maderix: ~30% slower beyond it): "
                "tile it along S",
            )


def slow_channel_reduction(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """reduce_sum or reduce_mean over channels (axis 1 of a rank-4 tensor) wider than ~256:
    ANEForge measures reduce_l2_norm about 48x faster than a channel reduce_sum there
    (reduce_mean is the same reduction scaled). A speed note: advice."""
    for op in view.ops("reduce_sum", "reduce_mean"):
        x = op.inputs["x"]
        assert isinstance(x, Var)
        if x.tensor.rank != 4:
            continue
        axes = const_value(op.inputs.get("axes"), list(range(4)))
        axes = [a % 4 for a in ([axes] if isinstance(axes, int) else axes)]
        if 1 in axes and x.tensor.shape[1] > SLOW_CHANNEL_REDUCTION:
            yield Hit(
                op,
                f"{op.type} {op.name!r} reduces {x.tensor.shape[1]} channels of "
                f"{shape_text(x.tensor.shape)}; ANEForge measures reduce_l2_norm about 48x "
                f"faster than a channel reduce_sum past ~{SLOW_CHANNEL_REDUCTION}: for a mean "
                "of squares use reduce_l2_norm and square it (rmsnorm variant l2norm)",
            )
