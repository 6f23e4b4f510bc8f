"""Checks of what crosses the program boundary: I/O surfaces, their layout and order, states,
and runtime-provided matmul operands.

The ANE reads and writes function inputs and outputs through IOSurfaces laid out channel-first,
[1, C, 1, S] (maderix README "How It Works"; tmc x/ane/doc.go: data[c * width + x]). The layout
rules below therefore read a rank-4 I/O tensor's axis 1 as C and its last axis as S (the row
width); other ranks are only checked for size and dtype. Each function is one rule of
`rules.RULES`.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.mil import DType, Var
from app.preflight.findings import Hit
from app.preflight.options import PreflightOptions
from app.preflight.view import ProgramView, const_value, is_const, shape_text

SURFACE_MIN_BYTES_ORION = 49_152
SURFACE_MIN_BYTES_IRONMILL = 16_384
WIDE_SHORT_CHANNELS = 768
WIDE_SHORT_WIDTH = 32
CHANNEL_ALIGN = 32
WIDTH_ALIGN = 16
ROW_STRIDE_BYTES = 64
STATE_ALIGN = 32
RUNTIME_MATMUL_INNER_ALIGN = 32
IO_DTYPES = (DType.FP16, DType.FP32)


def _bytes(var: Var) -> int:
    return var.tensor.size * var.tensor.dtype.numpy.itemsize


def _role(var: Var) -> str:
    return "output" if var.op is not None else "input"


def _channel_first(var: Var) -> tuple[int, int] | None:
    """(C, S) of a rank-4 I/O tensor, else None."""
    shape = var.tensor.shape
    return (shape[1], shape[3]) if len(shape) == 4 else None


def surface_minimum(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O tensors smaller than the smallest IOSurface the runtimes are reported to accept:
    ironmill 16 KB (below it, eval fails with status 0x1d), Orion about 49,152 B. tmc's on-device
    tests evaluate far smaller tensors (e.g. RMSNorm C=4, S=2), so this is about how a caller
    allocates surfaces, not about the program: a warning at the larger, conservative figure."""
    for var in view.io():
        size = _bytes(var)
        if size < SURFACE_MIN_BYTES_ORION:
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} {shape_text(var.tensor.shape)} "
                f"{var.tensor.dtype.value} is {size:,} bytes; ANE-direct runtimes are reported "
                f"to need IOSurfaces of at least {SURFACE_MIN_BYTES_IRONMILL:,} B (ironmill, "
                f"status 0x1d below) or about {SURFACE_MIN_BYTES_ORION:,} B (Orion): allocate "
                "the surface at that size, or batch more tokens into S",
            )


def wide_short_io(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O shaped [1, C, 1, S] with C > ~768 and S < 32: ironmill reports these rejected.
    One project on one chip, with the channel bound given as approximate ("~768"), and decode
    shapes (S = 1) are exactly what users need: a warning, not a refusal."""
    for var in view.io():
        cs = _channel_first(var)
        if cs and cs[0] > WIDE_SHORT_CHANNELS and cs[1] < WIDE_SHORT_WIDTH:
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} {shape_text(var.tensor.shape)} has C = "
                f"{cs[0]} > ~{WIDE_SHORT_CHANNELS} and S = {cs[1]} < {WIDE_SHORT_WIDTH}, a shape "
                f"ironmill reports rejected: pad S to {WIDE_SHORT_WIDTH}, or fold channels into "
                "S with a reshape inside the program",
            )


def channel_alignment(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O channels not a multiple of 32: ironmill calls 32-alignment "required for ANE
    efficiency" (a speed note, not a failure): advice."""
    for var in view.io():
        cs = _channel_first(var)
        if cs and cs[0] % CHANNEL_ALIGN:
            padded = -(-cs[0] // CHANNEL_ALIGN) * CHANNEL_ALIGN
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} has {cs[0]} channels, not a multiple of "
                f"{CHANNEL_ALIGN}; ironmill reports 32-aligned channels run faster: pad to "
                f"{padded} if this op is on a hot path",
            )


def width_alignment(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O width S not a multiple of 16: rustane says the spatial width must be one, while tmc's
    on-device RMSNorm test runs S = 2. Conflicting, so a warning."""
    for var in view.io():
        cs = _channel_first(var)
        if cs and cs[1] % WIDTH_ALIGN:
            padded = -(-cs[1] // WIDTH_ALIGN) * WIDTH_ALIGN
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} has width S = {cs[1]}, not a multiple of "
                f"{WIDTH_ALIGN}; rustane reports the width must be one (tmc runs S = 2): pad S "
                f"to {padded} if the ANE-direct eval fails",
            )


def row_stride(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O rows shorter than 64 bytes: tmc's x/ane doc says surface rows have a minimum stride of
    64 bytes, while Orion reports data read packed. A caller filling the surface row by row must
    know which: advice."""
    for var in view.io():
        shape = var.tensor.shape
        row = (shape[-1] if shape else 1) * var.tensor.dtype.numpy.itemsize
        if row < ROW_STRIDE_BYTES:
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} has rows of {row} bytes; tmc reports a minimum "
                f"IOSurface row stride of {ROW_STRIDE_BYTES} bytes (Orion: packed): an ANE-direct "
                "caller must write each row at the surface's own bytesPerRow, not packed",
            )


def multiple_inputs(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """More than one tensor input: maderix and ironmill report multi-input requests failing with
    status 0x1d and pack inputs along S, yet 3-input SDPA programs compile in tmc's and
    maderix's own tests. The reports conflict and the program itself is sound: advice."""
    inputs = list(view.inputs())
    if len(inputs) > 1:
        yield Hit(
            inputs[1],
            f"the program has {len(inputs)} inputs ({', '.join(v.name for v in inputs)}); "
            "maderix and ironmill report multi-input ANE requests failing with status 0x1d "
            "(3-input SDPA compiles in tmc and maderix): if evaluation fails, pack the inputs "
            "along S and slice_by_size them apart inside the program",
        )


def alphabetical_binding(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """Inputs or outputs not declared in alphabetical order: Orion reports the ANE binds
    IOSurfaces in alphabetical order of MIL names, so a caller binding in declaration order gets
    silently wrong data. The program is fine; its caller must know: advice."""
    for role, names in (
        ("inputs", [v.name for v in view.inputs()]),
        ("outputs", [v.name for v in view.outputs()]),
    ):
        if names != sorted(names):
            first = next(a for a, b in zip(names, sorted(names), strict=True) if a != b)
            subject = next(v for v in (*view.inputs(), *view.outputs()) if v.name == first)
            yield Hit(
                subject,
                f"{role} are declared as ({', '.join(names)}) but Orion reports the ANE binds "
                f"them in alphabetical order ({', '.join(sorted(names))}): an ANE-direct "
                "caller must pass surfaces in that order",
            )


def uniform_surface_sizes(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O surfaces of different sizes: Orion reports the ANE wants uniform input/output sizes
    (its compiler pads outputs to one size). A runtime concern: advice."""
    io = list(view.io())
    sizes = [_bytes(v) for v in io]
    if len(set(sizes)) > 1:
        largest = max(sizes)
        first = next(v for v, s in zip(io, sizes, strict=True) if s != largest)
        listing = ", ".join(f"{v.name}={s:,} B" for v, s in zip(io, sizes, strict=True))
        yield Hit(
            first,
            f"I/O surfaces differ in size ({listing}); Orion reports the ANE expects uniform "
            f"input/output sizes: allocate every surface at {largest:,} bytes",
        )


def io_dtype(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """I/O in a dtype other than fp16/fp32: ironmill reports int8 outputs rejected, ANEForge
    int32 compute. Reported on particular setups, and Core ML converts at the boundary: a
    warning."""
    for var in view.io():
        if var.tensor.dtype not in IO_DTYPES:
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} is {var.tensor.dtype.value}; ironmill reports "
                "int8 outputs rejected and ANEForge int32 compute: make the I/O fp16 and cast "
                "inside the program",
            )


def io_fp32(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """fp32 I/O: it works (the program casts), but maderix measures fp16 I/O about 37% faster:
    advice."""
    for var in view.io():
        if var.tensor.dtype is DType.FP32:
            yield Hit(
                var,
                f"{_role(var)} {var.name!r} is fp32; it works through a cast, but maderix "
                "measures fp16 I/O about 37% faster: use io_dtype fp16 when the caller can",
            )


def state_on_ane_direct(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """State parameters. On the ANE-direct path (macOS 26.x) tmc reports: a program whose only
    parameter is a state fails ("no LiveInputList in model attributes"); write_state then
    read_state compiles but eval fails (status 0x2). Core ML compiles these programs, and
    coremltools #2553 reports stateful models not running on the ANE there either. Path
    dependent: a warning."""
    inputs = list(view.inputs())
    for var in view.states():
        detail = (
            "fails ('no LiveInputList in model attributes') since the state is its only parameter"
            if not inputs
            else "compiles but its eval fails ('Program Inference error', status 0x2)"
        )
        yield Hit(
            var,
            f"state {var.name!r} {shape_text(var.tensor.shape)}: on the ANE-direct path this "
            f"program {detail} (tmc, macOS 26.x), and Core ML is reported to run stateful models "
            "off the ANE: pass the cache as an input and return the update as an output instead",
        )


def state_alignment(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """A state whose last axis is not a multiple of 32: coremltools #2631 reports the state
    dimension must be one. Which axis is not stated; the last (the surface row) is checked.
    One report: a warning."""
    for var in view.states():
        shape = var.tensor.shape
        if shape[-1] % STATE_ALIGN:
            padded = -(-shape[-1] // STATE_ALIGN) * STATE_ALIGN
            yield Hit(
                var,
                f"state {var.name!r} {shape_text(shape)} has a last axis of {shape[-1]}, not a "
                f"multiple of {STATE_ALIGN} (coremltools #2631): pad it to {padded}",
            )


def runtime_matmul_inner(view: ProgramView, options: PreflightOptions) -> Iterator[Hit]:
    """matmul of two runtime operands with an inner dimension not a multiple of 32: maderix #47
    reports runtime-weight matmuls then return silent zeros. One report, on the runtime-weight
    form: a warning (it also covers activation x activation products such as Q.K^T)."""
    for op in view.ops("matmul"):
        x, y = op.inputs["x"], op.inputs["y"]
        if not (isinstance(x, Var) and isinstance(y, Var)) or is_const(x) or is_const(y):
            continue
        transpose_x = bool(const_value(op.inputs.get("transpose_x"), False))
        inner = x.tensor.shape[-2] if transpose_x else x.tensor.shape[-1]
        if inner % RUNTIME_MATMUL_INNER_ALIGN:
            padded = -(-inner // RUNTIME_MATMUL_INNER_ALIGN) * RUNTIME_MATMUL_INNER_ALIGN
            yield Hit(
                op,
                f"matmul {op.name!r} multiplies two runtime operands over an inner dimension of "
                f"{inner}, not a multiple of {RUNTIME_MATMUL_INNER_ALIGN}; maderix reports such "
                f"matmuls returning silent zeros: pad the inner dimension to {padded} with zeros",
            )
