"""Shape checks: tensor rank, per-axis size, conv kernel size.

Each function is one rule of `rules.RULES` (where its id, severity and source sit); its docstring
says how the research's reports were read, and why at that severity where they conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from app.devices import AXIS_MAX_ANY_CHIP, AXIS_MAX_EVERY_CHIP
from app.mil import Operation, TensorType, Var
from app.preflight.findings import Hit
from app.preflight.options import PreflightOptions
from app.preflight.view import ProgramView, shape_text

CORE_ML_MAX_RANK = 5
ANE_MAX_RANK = 4
# The per-axis limits are the device table's (app/devices): the largest any chip takes, and the
# smallest (A13-A15-class chips).
AXIS_MAX_OLDER_CHIPS = AXIS_MAX_EVERY_CHIP
CONV_KERNEL_MAX_ANY_CHIP = 16
CONV_KERNEL_MAX_M1 = 13


def _what(subject: Operation | Var) -> str:
    if isinstance(subject, Var):
        return f"input {subject.name!r}"
    return f"const {subject.name!r}" if subject.type == "const" else f"output of {subject.name!r}"


def _first_per_subject(
    view: ProgramView, predicate: Callable[[TensorType], bool], *, runtime_only: bool = False
):
    """The first tensor of each input or op that matches (one finding per node is enough);
    with `runtime_only`, only tensors the program computes on (`ProgramView.runtime_tensors`)."""
    flagged: set[int] = set()
    for subject, tensor in view.runtime_tensors() if runtime_only else view.tensors():
        if id(subject) not in flagged and predicate(tensor):
            flagged.add(id(subject))
            yield subject, tensor


def rank_over_core_ml_max(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Rank above 5. Core ML rejects the program before any compiler sees it
    (coremltools' `_check_early_error_out_for_invalid_program`, coremltools-linux.md), and the
    ANE reports cap it lower still, so every source agrees: an error. The same coremltools check
    allows a higher rank on a const read only by constexpr ops (an iOS18 palette for a conv
    weight is rank 6), so those are not counted."""
    for subject, tensor in _first_per_subject(
        view, lambda t: t.rank > CORE_ML_MAX_RANK, runtime_only=True
    ):
        yield Hit(
            subject,
            f"{_what(subject)} has rank {tensor.rank} ({shape_text(tensor.shape)}); Core ML "
            f"accepts rank <= {CORE_ML_MAX_RANK} and the ANE works in rank 4 [1, C, 1, S]: "
            "fold axes together with reshape",
        )


def rank_five(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Rank exactly 5. ANEForge reports a "rank4 cap" (transpose+matmul fails at rank >= 5)
    while its op-quirks notes allow rank <= 5 for other ops: the reports conflict, so the
    conservative reading (any rank-5 tensor may fail) is a warning, not an error. Both reports
    are about tensors the ANE computes on: a const read only by constexpr ops is expanded at
    load and never reaches it, so it is not counted (as for `rank_over_core_ml_max`)."""
    for subject, tensor in _first_per_subject(
        view, lambda t: t.rank == CORE_ML_MAX_RANK, runtime_only=True
    ):
        yield Hit(
            subject,
            f"{_what(subject)} has rank 5 ({shape_text(tensor.shape)}); ANEForge reports "
            f"transpose+matmul failing at rank >= 5 and caps tensors at rank "
            f"{ANE_MAX_RANK}: fold an axis (e.g. heads into channels) to stay at rank 4",
        )


def _largest_axis(shape: tuple[int, ...]) -> tuple[int, int]:
    axis = max(range(len(shape)), key=lambda i: (shape[i], -i))
    return axis, shape[axis]


def axis_over_any_chip(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """An axis above 65,536: the largest per-axis size any report gives (ANEForge: 65,536 from
    A16 on, 16,384 before; ironmill: 16,384), so every source expects a failure: an error."""
    for subject, tensor in _first_per_subject(
        view, lambda t: max(t.shape, default=0) > AXIS_MAX_ANY_CHIP
    ):
        axis, size = _largest_axis(tensor.shape)
        yield Hit(
            subject,
            f"axis {axis} of {_what(subject)} {shape_text(tensor.shape)} is {size:,}, above "
            f"{AXIS_MAX_ANY_CHIP:,}, the largest per-axis size any chip is reported to "
            "take: split the tensor along that axis into several ops",
        )


def axis_over_older_chips(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """An axis in (16,384, 65,536]. ironmill gives 16,384 as the maximum tensor dimension and
    matmul inner dimension; ANEForge gives 16,384 on A13-A15 and 65,536 from A16 on. Chip
    dependent, hence a warning."""

    def in_band(t: TensorType) -> bool:
        return AXIS_MAX_OLDER_CHIPS < max(t.shape, default=0) <= AXIS_MAX_ANY_CHIP

    for subject, tensor in _first_per_subject(view, in_band):
        axis, size = _largest_axis(tensor.shape)
        yield Hit(
            subject,
            f"axis {axis} of {_what(subject)} {shape_text(tensor.shape)} is {size:,}, above "
            f"{AXIS_MAX_OLDER_CHIPS:,}: reported to fail on A13-A15-class chips and in "
            "ironmill's measurements (newer chips take up to 65,536); split along that "
            "axis to run everywhere",
        )


def _conv_kernel(op: Operation) -> tuple[int, ...]:
    weight = op.inputs["weight"]
    assert isinstance(weight, Var)
    return weight.tensor.shape[2:]


def conv_kernel_over_any_chip(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """A conv kernel side above 16: ironmill's maximum is 16x16 and ANEForge's is 15 (M5) or 13
    (M1), so no report compiles it: an error."""
    for op in view.ops("conv"):
        kernel = _conv_kernel(op)
        if kernel and max(kernel) > CONV_KERNEL_MAX_ANY_CHIP:
            yield Hit(
                op,
                f"conv kernel {'x'.join(map(str, kernel))} has a side of {max(kernel)}, above "
                f"{CONV_KERNEL_MAX_ANY_CHIP} (ironmill's 16x16 maximum; ANEForge: 15 on M5, 13 "
                "on M1): split it into several convs over shifted slices and add them",
            )


def conv_kernel_chip_dependent(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """A conv kernel side of 14 to 16. ANEForge: kW <= 13 on M1, <= 15 on M5, and a 1xK kernel
    with K >= 16 fails on M5; ironmill allows 16x16. The reports conflict and differ by chip,
    so a warning."""
    for op in view.ops("conv"):
        kernel = _conv_kernel(op)
        if kernel and CONV_KERNEL_MAX_M1 < max(kernel) <= CONV_KERNEL_MAX_ANY_CHIP:
            yield Hit(
                op,
                f"conv kernel {'x'.join(map(str, kernel))} has a side of {max(kernel)}: ANEForge "
                f"reports sides above {CONV_KERNEL_MAX_M1} failing on M1 and above 15 on M5 "
                f"(ironmill allows {CONV_KERNEL_MAX_ANY_CHIP}); keep sides <= "
                f"{CONV_KERNEL_MAX_M1} to compile on every reported chip",
            )
