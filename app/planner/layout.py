"""The one layout of a decoder kit, from config.json and the options alone: which programs, the
layers or vocabulary rows each holds, the precision of each part and the bytes each program's
weight.bin holds. `ane-kernels plan` (app/planner/plan.py) predicts from it and `ane-kernels
model` (app/kits/build.py) builds it; one function, one set of defaults.

    layout = lay_out(config, device="a18-pro", quantize={"mode": "palettize", "nbits": 4})
    [p.name for p in layout.programs], layout.functions, layout.warnings

- Envelope: a device's per-program weight envelope and per-axis limit (app/devices), or, with no
  device, the default every chip takes: ANE_MAX_PROGRAM_WEIGHT_BYTES (by default the table's
  smallest envelope) and the smallest axis limit of the table.
- Layers: as many whole layers per program as the envelope holds at the layers' stored bytes,
  evened out (app.devices.llm.layer_groups).
- Head: the vocabulary in equal pieces, each within the rows one op may have (the smaller of the
  ops' 16,384 parameter cap and the chip's axis limit) and the envelope; `head_rule` names which.
- Precision: `quantize` is one config for every projection and the head, or {"layers": ...,
  "head": ...} (a part left out stays fp16: app/planner/parts.py); the embedding table is fp16
  either way. Each part's config is checked against every weight shape it meets.
- Lengths: the context and the tokens per prefill call, with their defaults
  (app/planner/lengths.py); the decoder programs' constant tables grow with both.
- Compiled functions: a decoder program has two (prefill, decode), a head piece one; a kit loads
  them all at once, and above `MAX_LIVE_FUNCTIONS` the layout warns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.checkpoints.config import params_from_config
from app.devices import AXIS_MAX_EVERY_CHIP
from app.devices.llm import layer_groups
from app.errors import ErrorKind, RequestError
from app.estimates import device_or_error
from app.kernels.decoder_stack import DecoderStackParams
from app.kernels.params import MAX_DIM
from app.kernels.transformer_params import decoder_weights
from app.kernels.transformer_program import decode_tables
from app.planner.lengths import lengths
from app.planner.parts import Part, read_parts
from app.planner.shape import shape_from_config
from app.quantize.sizes import Stored, blob_bytes, stored_bytes
from app.settings import Settings

# tmc/apple measured at most fifteen live compiled functions per process on the ANE (the 16th
# fails with status 13, and the pool is shared between processes):
# ../shared/research/ane-anchors-2026-11-27.md §1.1, examples/ane/e5rtstack/README.md.
MAX_LIVE_FUNCTIONS = 15
LIVE_FUNCTIONS_SOURCE = "tmc/apple examples/ane/e5rtstack/README.md @ 0f807244"
# A plan lists every program: past this many it is refused before any is computed (a config
# of absurd sizes would make a huge answer).
MAX_PROGRAMS = 4096
DECODER_FUNCTIONS = ("prefill", "decode")
HEAD_FUNCTIONS = ("main",)
KV_MODES = ("io", "state")


@dataclass(frozen=True)
class Envelope:
    """What one program may hold: weight bytes, and rows along one axis."""

    device: str | None  # the chip's name; None: the default every chip takes
    budget: int
    axis_max: int  # the chip's largest axis (the table's smallest, with no device)

    @property
    def head_rows(self) -> int:
        """Rows one head piece may have: the chip's axis limit, never past the ops' own
        parameter limit (MAX_DIM, a public contract of every op)."""
        return min(self.axis_max, MAX_DIM)

    def describe(self) -> str:
        where = (
            self.device
            if self.device is not None
            else "no device: the default every chip takes (ANE_MAX_PROGRAM_WEIGHT_BYTES, the "
            "table's smallest axis limit); name one with --device"
        )
        return f"{self.budget:,} weight bytes per program, axis limit {self.axis_max:,} ({where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "max_program_weight_bytes": self.budget,
            "axis_max": self.axis_max,
            "default": self.device is None,
        }


def envelope_for(device: str | None, max_program_weight_bytes: int | None = None) -> Envelope:
    """A device's envelope (an asked-for budget lowers it), or the default one."""
    if device is None:
        budget = max_program_weight_bytes or Settings().max_program_weight_bytes
        return Envelope(None, budget, AXIS_MAX_EVERY_CHIP)
    chip = device_or_error(device)
    budget = chip.program_weight_bytes.value
    if max_program_weight_bytes:
        budget = min(budget, max_program_weight_bytes)
    return Envelope(chip.name, budget, chip.axis_max.value)


@dataclass(frozen=True)
class Program:
    name: str  # decoder_<k> or head_<k>, as the kit names it
    role: str  # "decoder" | "head"
    rows: range  # the layers it holds, or the vocabulary rows it computes
    weight_bytes: int
    functions: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        where = (
            {"layers": [self.rows.start, self.rows.stop - 1]}
            if self.role == "decoder"
            else {"vocab": [self.rows.start, self.rows.stop]}
        )
        return {
            "name": self.name,
            "role": self.role,
            **where,
            "weight_bytes": self.weight_bytes,
            "functions": list(self.functions),
        }


@dataclass(frozen=True)
class Layout:
    envelope: Envelope
    context: int
    prefill: int  # tokens per prefill call (the prefill function's length)
    kv: str
    layers: Part
    head: Part
    layer_bytes: int  # one layer's weight.bin bytes at the layers' precision
    programs: tuple[Program, ...]
    head_rule: str
    exact: bool  # every program's bytes exact (a pruned part's are an estimate)
    embedding_bytes: int  # the fp16 embedding table the app gathers from
    over_caps: tuple[tuple[str, int, int], ...] = ()  # sizes past the ops' caps: no kit builds

    @property
    def decoders(self) -> list[Program]:
        return [p for p in self.programs if p.role == "decoder"]

    @property
    def heads(self) -> list[Program]:
        return [p for p in self.programs if p.role == "head"]

    @property
    def functions(self) -> int:
        """Compiled functions the kit loads at once: every function of every program."""
        return sum(len(p.functions) for p in self.programs)

    @property
    def weight_bytes(self) -> int:
        return sum(p.weight_bytes for p in self.programs)

    def warnings(self) -> list[dict[str, Any]]:
        if self.functions <= MAX_LIVE_FUNCTIONS:
            return []
        return [
            {
                "rule": "kit.live-functions",
                "part": "kit",
                "message": f"the kit loads {self.functions} compiled functions at once "
                f"({len(self.decoders)} decoder programs of 2, {len(self.heads)} head pieces); "
                f"at most {MAX_LIVE_FUNCTIONS} were measured live per process on the ANE (the "
                "next fails, and the pool is shared between processes): run it in phases, or "
                "quantize for fewer programs",
                "source": LIVE_FUNCTIONS_SOURCE,
            }
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "envelope": self.envelope.to_json(),
            "context": self.context,
            "prefill": self.prefill,
            "kv": self.kv,
            "precision": {"layers": self.layers.describe(), "head": self.head.describe()},
            "quantize": {"layers": self.layers.quantize, "head": self.head.quantize},
            "head_rule": self.head_rule,
            "functions": self.functions,
            "max_live_functions": MAX_LIVE_FUNCTIONS,
            "weight_bytes_exact": self.exact,
        }


def stack_params(
    config: Mapping[str, Any],
) -> tuple[DecoderStackParams, tuple[tuple[str, int, int], ...]]:
    """One layer of the model as the decoder_stack op takes it (its weights' shapes), and each
    size over the ops' own caps as (key, value, cap): such a config is laid out, to say what it
    would take, but no kit of it builds."""
    decoder = params_from_config(dict(config))
    fields = DecoderStackParams.model_fields
    params = {k: v for k, v in decoder.items() if k in fields}
    params |= {"first_layer": 0, "num_layers": 1, "seq_len": 1}
    try:
        return DecoderStackParams.model_validate(params), ()
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        if any(e["type"] != "less_than_equal" or len(e["loc"]) != 1 for e in errors):
            key = ".".join(str(k) for k in first["loc"])
            raise RequestError(
                f"config.{key}" if key else "config",
                f"{first['msg']} (the decoder ops' limit: no kit of this config builds)",
            ) from None
        over = tuple((str(e["loc"][0]), int(e["input"]), int(e["ctx"]["le"])) for e in errors)
        return DecoderStackParams.model_construct(**params), over


def _layer_stored(p: DecoderStackParams, part: Part) -> Stored:
    total = Stored(0)
    for spec in decoder_weights(p):
        if spec.quantizable:
            part.check(spec.shape)
        total += stored_bytes(spec.shape, part.config if spec.quantizable else None)
    return total


def tables_bytes(p: DecoderStackParams, context: int, prefill: int, kv: str) -> int:
    """A decoder program's constant tables (app.kernels.transformer_program.decode_tables): its
    weight.bin holds the prefill function's, which hold the decode function's."""
    tables = decode_tables(p.dim, context, prefill, kv == "state")
    return sum(blob_bytes(n, dtype.bits) for n, dtype in tables.values())


def _head_stored(rows: int, hidden: int, part: Part) -> Stored:
    """A head piece: the final norm's gains and `rows` rows of lm_head."""
    return stored_bytes((hidden,), None) + stored_bytes((rows, hidden, 1, 1), part.config)


def head_pieces(vocab: int, hidden: int, envelope: Envelope, part: Part) -> tuple[int, str]:
    """Rows per head piece (whole palette groups each, when the head's palettes are grouped),
    and the rule that set them."""
    align = part.align
    if vocab % align:
        raise RequestError(
            f"{part.field}.group_size",
            f"{align} does not divide the vocabulary of {vocab:,}: the head's pieces cannot all "
            "hold whole groups; choose a group size that divides it, or quantize the head apart "
            '({"layers": ..., "head": ...})',
        )
    part.check((align, hidden, 1, 1))
    row_bytes = max(1, _head_stored(1, hidden, part).nbytes - stored_bytes((hidden,), None).nbytes)
    by_budget = envelope.budget // row_bytes
    rows = min(envelope.head_rows, by_budget) // align * align
    if rows < 1:
        raise RequestError(
            "max_program_weight_bytes",
            f"{align} head rows hold about {align * row_bytes} bytes, over the budget of "
            f"{envelope.budget} bytes per program",
            limit=envelope.budget,
            title="Program too large",
        )
    if by_budget < envelope.head_rows:
        rule = f"the per-program weight envelope of {envelope.budget:,} bytes"
    elif envelope.axis_max > MAX_DIM:
        rule = f"the ops' parameter cap of {MAX_DIM:,} per dimension"
    else:
        rule = f"the chip's axis limit of {envelope.axis_max:,}"
    whole = f", in whole groups of {align}" if align > 1 else ""
    return rows, f"at most {rows:,} vocabulary rows per piece{whole}: {rule}"


def lay_out(
    config: Mapping[str, Any],
    *,
    device: str | None = None,
    quantize: Mapping[str, Any] | str | None = None,
    context: int | None = None,
    prefill: int | None = None,
    kv: str = "io",
    max_program_weight_bytes: int | None = None,
) -> Layout:
    """The kit's layout; a layer over the envelope is laid out one per program (the planner
    reports it, the kit builder refuses it)."""
    if kv not in KV_MODES:
        raise RequestError("kv", f"{kv!r}; io (cache as inputs/outputs) or state (ios18)")
    envelope = envelope_for(device, max_program_weight_bytes)
    layers_part, head_part = read_parts(quantize)
    context, prefill = lengths(config, context, prefill)
    shape = shape_from_config(config)  # every key checked, named when it is not
    p, over_caps = stack_params(config)
    num_layers, vocab, hidden = shape.layers, shape.vocab, shape.hidden
    layer = _layer_stored(p, layers_part)
    groups = layer_groups(num_layers, layer.nbytes, envelope.budget)
    tables = tables_bytes(p, context, prefill, kv)
    rows, rule = head_pieces(vocab, hidden, envelope, head_part)
    pieces = math.ceil(vocab / rows)
    if len(groups) + pieces > MAX_PROGRAMS:
        raise RequestError(
            "config.num_hidden_layers" if pieces <= MAX_PROGRAMS else "config.vocab_size",
            f"the layout would need {len(groups) + pieces:,} programs ({len(groups):,} of layers, "
            f"{pieces:,} of the head), over the planner's limit of {MAX_PROGRAMS:,}",
            kind=ErrorKind.TOO_LARGE,
            limit=MAX_PROGRAMS,
        )
    programs, first, exact = [], 0, layer.exact
    for k, count in enumerate(groups):
        programs.append(
            Program(
                f"decoder_{k}",
                "decoder",
                range(first, first + count),
                layer.nbytes * count + tables,
                DECODER_FUNCTIONS,
            )
        )
        first += count
    size = -(-math.ceil(vocab / pieces) // head_part.align) * head_part.align
    for k, start in enumerate(range(0, vocab, size)):
        piece = range(start, min(start + size, vocab))
        stored = _head_stored(len(piece), hidden, head_part)
        exact = exact and stored.exact
        programs.append(Program(f"head_{k}", "head", piece, stored.nbytes, HEAD_FUNCTIONS))
    return Layout(
        envelope,
        context,
        prefill,
        kv,
        layers_part,
        head_part,
        layer.nbytes,
        tuple(programs),
        rule,
        exact,
        2 * vocab * hidden,
        over_caps,
    )
