"""A checkpoint folder -> a kit zip: plan, build every program, write the tables, copy the
tokenizer, verify when asked, then write kit.json (the digest of every file).

The zip is written as the kit is built, one program at a time (`write_kit_zip`), so a model of
billions of parameters never has more than one program's weights in memory; it is written
atomically: bad input, found early (options, config, tensors' headers) or late (a tensor's
values), leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import gc
import tempfile
import time
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from app.artifacts import Limits, Prepared, prepare, weight_bytes
from app.core.files import Sink, atomic_file, scratch_dir
from app.core.formats import KIT_FORMATS
from app.errors import RequestError
from app.estimates import device_or_error
from app.kernels.rope import tables
from app.kits import manifest
from app.kits.auto import auto_parts
from app.kits.causal_lm import Model, open_model
from app.kits.gate import check_thresholds
from app.kits.held import HeldWeights
from app.kits.kitzip import KitZip
from app.kits.programs import (
    TARGET,
    DecoderChunk,
    HeadPiece,
    KitProgram,
    program_entries,
    program_path,
)
from app.kits.quality import Quality
from app.kits.reference import WholeModel
from app.kits.runner import read_zip
from app.kits.verify import check_verify_memory
from app.kits.weights import KitHeldWeights
from app.packaging import Entry, write_zip
from app.packaging.layout import VERIFICATION_JSON
from app.planner import Plan, make_plan
from app.planner.lengths import lengths
from app.planner.parts import read_parts
from app.preflight import findings_to_json
from app.settings import Settings

Progress = Callable[[str], None]
COLLECT_ABOVE_BYTES = 64 << 20  # checkpoints above it: garbage collected after each program


@dataclass(frozen=True)
class KitOptions:
    """What the CLI's flags and the Python API's keywords set (docs/kits.md)."""

    format: str = "mlpackage"
    context: int | None = None  # default min(512, max_position_embeddings)
    prefill: int | None = None  # tokens per prefill call; default min(64, context)
    device: str | None = None  # None: the default envelope every chip takes
    # {"layers": cfg, "head": cfg}, or cfg for both; "auto" (or a part "auto"): the lightest
    # setting that passes max_kl / min_top1 (app/kits/auto.py)
    quantize: Mapping[str, Any] | str | None = None
    kv: str = "io"
    verify: bool = False
    prompts: str | Path | None = None  # the quality gate's prompts file (default: seeded ids)
    max_kl: float | None = None  # the quality gate's thresholds (app/kits/gate.py)
    min_top1: float | None = None
    strict: bool = False  # refuse a quantization reported failing or not modelled
    max_program_weight_bytes: int | None = None  # default ANE_MAX_PROGRAM_WEIGHT_BYTES
    mlmodelc_profile: str | None = None

    def check(self) -> None:
        """What can be refused before the checkpoint is read: format, kv, device."""
        _check_options(self)


@dataclass(frozen=True)
class KitResult:
    path: Path | None
    meta: dict[str, Any]  # kit.json
    size: int
    seconds: float
    verification: dict[str, Any] | None = None
    files: dict[str, bytes] = field(default_factory=dict, repr=False)


def kit_lengths(
    model: Model, options: KitOptions, max_verify_bytes: int | None = None
) -> tuple[int, int]:
    """(context, prefill) of a kit of `model`: the options', or the defaults; checked against
    each other, the model's positions and, when verifying, the verification's memory (at most
    `max_verify_bytes`, default ANE_MAX_VERIFY_BYTES)."""
    context, prefill = lengths(model.config, options.context, options.prefill)
    if options.verify:
        heads = model.stack_params(0, 1, seq_len=1).heads
        limit = Settings().max_verify_bytes if max_verify_bytes is None else max_verify_bytes
        check_verify_memory(heads, context, prefill, limit)
    return context, prefill


def _check_options(options: KitOptions) -> None:
    if options.format not in KIT_FORMATS:
        raise RequestError("format", f"{options.format!r}; one of {', '.join(KIT_FORMATS)}")
    if options.kv not in ("io", "state"):
        raise RequestError("kv", f"{options.kv!r}; io (cache as inputs/outputs) or state (ios18)")
    if options.device is not None:
        device_or_error(options.device)  # names the known devices
    _check_quantize(options.quantize)
    thresholds = check_thresholds(options.max_kl, options.min_top1)
    auto = auto_parts(options.quantize) is not None
    if auto and not thresholds:
        raise RequestError("max_kl", "quantize auto needs a threshold: max_kl, min_top1 or both")
    if not (auto or options.verify):
        for name in ("max_kl", "min_top1", "prompts"):
            if getattr(options, name) is not None:
                raise RequestError(name, "the quality gate's: give it with verify or quantize auto")


def _check_quantize(quantize: Mapping[str, Any] | str | None) -> None:
    """Each part's config read as the option spells it, before any program is built: later the
    config sits inside each program's own request, under paths the user never wrote."""
    read_parts(quantize)


def kit_plan(model: Model, options: KitOptions, context: int, prefill: int) -> Plan:
    """The planner's plan of this kit (its layout is what gets built); a layer over the
    envelope is refused (no cut at layer boundaries meets it), and with `strict` a
    quantization the field reports failing on the path, or the planner cannot model."""
    plan = make_plan(
        model.config,
        options.device,
        quantize=options.quantize,
        context=context,
        prefill=prefill,
        kv=options.kv,
        max_program_weight_bytes=options.max_program_weight_bytes,
    )
    layout = plan.layout
    if layout.over_caps:
        key, size, cap = layout.over_caps[0]
        raise RequestError(f"config.{key}", f"{size} is over the decoder ops' limit of {cap}")
    if layout.layer_bytes > layout.envelope.budget:
        budget = layout.envelope.budget
        raise RequestError(
            "max_program_weight_bytes",
            f"one decoder layer holds {layout.layer_bytes} bytes of weights, over the budget of "
            f"{budget} bytes per program: no cut at layer boundaries meets it; raise the "
            "budget or quantize",
            title="Program too large",
            limit=budget,
        )
    if options.strict:
        plan.check_strict()
    return plan


def _strict_rungs(
    model: Model, options: KitOptions, context: int, prefill: int
) -> Callable[[str, dict[str, Any] | None], bool]:
    """For `--strict --quantize auto`: whether a rung of the ladder, for one part (the other
    fp16), is one `--strict` would refuse; the ladder skips those instead of failing after."""

    def allows(part: str, config: dict[str, Any] | None) -> bool:
        if config is None:
            return True
        one_part = replace(options, strict=False, quantize={part: config})
        return not kit_plan(model, one_part, context, prefill).strict_refusals()

    return allows


def build_kit_files(
    checkpoint: str | Path, options: KitOptions = KitOptions(), progress: Progress | None = None
) -> KitResult:
    """Every file of the kit in memory (kit.json last): the kit written to a temporary file,
    then read back. For small models; `build_kit` writes a kit of any size to a file."""
    with tempfile.TemporaryFile(prefix="kit-") as f:
        meta, verification, seconds = write_kit_zip(checkpoint, options, f, progress)
        f.seek(0)
        files = _read_back(f)
    return KitResult(None, meta, sum(len(v) for v in files.values()), seconds, verification, files)


def _read_back(f) -> dict[str, bytes]:
    files = read_zip(f)
    kit_json = files.pop(manifest.KIT_JSON)
    return files | {manifest.KIT_JSON: kit_json}


@dataclass
class _Writing:
    """A kit being written: its zip, what kit.json will say of each program, and (verifying)
    the weights the programs compute with."""

    model: Model
    options: KitOptions
    plan: Plan
    context: int
    prefill: int
    kit: KitZip
    held: HeldWeights | None
    scratch: Path | None = None  # where scratch directories go (None: the system's temp dir)
    described: dict[str, dict[str, Any]] = field(default_factory=dict)
    done: int = 0

    def say_program(self, say: Progress, name: str, what: str) -> None:
        self.done += 1
        say(f"[{self.done}/{len(self.plan.layout.programs)}] {name}: {what}")

    def prepare(self, program: KitProgram) -> Prepared[KitProgram]:
        """The program built and preflighted by the one builder, within the plan's budget."""
        budget = self.plan.layout.envelope.budget
        return prepare(program, Limits(max_program_weight_bytes=budget))

    def add_program(
        self, prepared: Prepared[KitProgram], role: str, describe: dict[str, Any]
    ) -> None:
        """Write the program's files and note what kit.json says of it (its preflight findings
        too); nothing of it is kept."""
        build, name = prepared.build, prepared.request.name
        self.described[name] = {
            "name": name,
            "role": role,
            "path": program_path(name, self.options.format),
            "weight_bytes": weight_bytes(build),
            "functions": build.signature(),
            "preflight": findings_to_json(prepared.findings),
            **describe,
        }
        with program_entries(
            build, self.options.format, self.options.mlmodelc_profile, self.scratch
        ) as entries:
            for e in sorted(entries, key=lambda e: e.path):
                self.kit.add(Entry(e.path, e.data, e.stream, e.size, compress=_compressed(e.path)))


def write_kit_zip(
    checkpoint: str | Path,
    options: KitOptions,
    f: BinaryIO,
    progress: Progress | None = None,
    scratch: Path | None = None,
) -> tuple[dict, dict | None, float]:
    """Build the kit into `f` (a file opened for writing and reading, at its start), one
    program at a time: each is built, its files written into the zip and let go before the
    next. The zip's entries go in path order (as every deterministic zip of the project), so the
    programs are built in the order of their paths; kit.json, which holds every file's digest,
    is written once every file before it is, and the few small files after it are held until
    then. Scratch directories (the weights held for verifying, a compile's bundle) go under
    `scratch`, a service's temp area (default: the system's temp directory; app/core/files.py,
    `scratch_dir`). kit.json, the verification report and the build's seconds."""
    started = time.perf_counter()
    say = progress or (lambda message: None)
    _check_options(options)
    model = open_model(checkpoint)
    context, prefill = kit_lengths(model, options)
    base = model.stack_params(0, 1, seq_len=1)
    quality = Quality.of(model, context, options.prompts, options.max_kl, options.min_top1)
    if options.quantize is not None and auto_parts(options.quantize) is not None:
        fp16_heads = kit_plan(model, options, context, prefill).layout.heads
        allowed = _strict_rungs(model, options, context, prefill) if options.strict else None
        heads = [p.rows for p in fp16_heads]
        chosen = quality.choose(model, options.quantize, heads, say, allowed)
        options = replace(options, quantize=chosen)
    plan = kit_plan(model, options, context, prefill)
    layout = plan.layout
    layers_q, head_q = layout.layers.quantize, layout.head.quantize  # as the plan read them
    norm = model.final_norm()
    eps = float(model.decoder.get("rms_norm_eps", 1e-6))
    held_dir = scratch_dir(".held", scratch) if options.verify else contextlib.nullcontext()
    with held_dir as folder, KitZip(f) as kit:
        held = HeldWeights(folder) if folder is not None else None
        writing = _Writing(model, options, plan, context, prefill, kit, held, scratch)

        def decoder(k: int, layers: range) -> None:
            name = f"decoder_{k}"
            writing.say_program(say, name, f"layers {layers.start}-{layers.stop - 1}")
            stack = {key: v for key, v in model.decoder.items() if key in type(base).model_fields}
            stack |= {"first_layer": layers.start, "num_layers": len(layers)}
            # compressed as they are read: one fp16 tensor in memory at a time, not the program
            weights = model.layer_weights(layers.start, len(layers), on_read=layers_q is not None)
            chunk = DecoderChunk(
                name, options.format, weights, layers_q, stack, context, prefill, options.kv
            )
            prepared = writing.prepare(chunk)
            if held is not None:
                held.put_layers(prepared.build.program_weights)
            meta = _decoder_meta(prepared.build, layers, context, options.kv)
            writing.add_program(prepared, "decoder", meta)

        def head(k: int, rows: range) -> None:
            name = f"head_{k}"
            writing.say_program(say, name, f"vocabulary {rows.start}-{rows.stop - 1}")
            weights = {"norm.weight": norm, "lm_head.weight": model.head_rows(rows)}
            piece = HeadPiece(name, options.format, weights, head_q, model.hidden_size, eps)
            prepared = writing.prepare(piece)
            if held is not None:
                held.put_head_rows(k, prepared.build.program_weights["lm_head.weight"])
            writing.add_program(prepared, "head", {"vocab": [rows.start, rows.stop]})

        cos, sin = tables(np.arange(context), base.dim, base.rope_theta, base.rope_scaling)
        tokenizer = model.tokenizer_files()
        small: dict[str, Callable[[], bytes]] = {
            manifest.ROPE_FILE: lambda: np.stack([cos, sin]).astype("<f2").tobytes(),
            **{p.name: p.read_bytes for p in tokenizer},
        }
        parts: dict[str, Callable[[], None]] = {
            **{
                program_path(f"decoder_{k}", options.format): partial(decoder, k, p.rows)
                for k, p in enumerate(layout.decoders)
            },
            **{
                program_path(f"head_{k}", options.format): partial(head, k, p.rows)
                for k, p in enumerate(layout.heads)
            },
            manifest.EMBEDDINGS_FILE: partial(_write_embeddings, writing),
        }
        tail: dict[str, bytes] = {}  # the files after kit.json, held until it is written
        # a built program's ops and vars reference each other: collected before the next is
        # built when the weights they hold matter (a test model's do not, and collecting costs)
        collect = sum(t.nbytes for t in model.tensors.values()) > COLLECT_ABOVE_BYTES
        for path in sorted({*parts, *small}):
            if path < manifest.KIT_JSON:
                parts[path]() if path in parts else writing.kit.add(_file(path, small[path]()))
                if collect:
                    gc.collect()
            else:
                assert path not in parts, path  # only small files follow kit.json
                tail[path] = small[path]()
        programs = [writing.described[p.name] for p in layout.programs]
        meta = _kit_json(
            model, options, plan, programs, context, prefill, base, [p.name for p in tokenizer]
        )
        verification = None
        if held is not None:
            say("verifying against the float64 model")
            whole = WholeModel(
                base,
                model.num_layers,
                held.layer,
                _table(writing.kit.read(manifest.EMBEDDINGS_FILE), model),
                norm,
                held.head_pieces(),
            )
            verification = _verify(writing.kit, tail, meta, whole, model.vocab_size)
            tail[VERIFICATION_JSON] = manifest.to_bytes(verification)
            meta["verification"] = {k: verification[k] for k in ("passed",)} | {
                "logits_max_rel_error": verification["logits"]["max_rel_error"],
                "tolerance": verification["logits"]["tolerance"],
                "greedy_compared_steps": verification["greedy"]["compared_steps"],
            }
            del whole
            if options.quantize is not None:
                say("measuring the quality gate in float64")
                table = _table(writing.kit.read(manifest.EMBEDDINGS_FILE), model)
                kit_weights = KitHeldWeights(held, table, norm)
                head_rows = [p.rows for p in layout.heads]
                meta["quality"] = quality.gate(model, kit_weights, head_rows)
        if quality.auto is not None:
            meta["quantize_auto"] = quality.auto
        meta["files"] = dict(sorted((writing.kit.digests | manifest.digests(tail)).items()))
        writing.kit.add(Entry(manifest.KIT_JSON, manifest.to_bytes(meta)))
        for path in sorted(tail):
            writing.kit.add(_file(path, tail[path]))
    return meta, verification, time.perf_counter() - started


EMBEDDING_ROWS_BYTES = 64 << 20  # the embedding table is converted this many fp16 bytes at a time


def _write_embeddings(writing: _Writing) -> None:
    """The fp16 embedding table, converted from the checkpoint a block of rows at a time."""
    model = writing.model
    row_bytes = 2 * model.hidden_size
    step = max(1, EMBEDDING_ROWS_BYTES // row_bytes)

    def stream(out: Sink) -> int:
        written = 0
        for start in range(0, model.vocab_size, step):
            rows = model.embedding_rows(range(start, min(start + step, model.vocab_size)))
            written += out.write(np.ascontiguousarray(rows, "<f2").data)
        return written

    size = model.vocab_size * row_bytes
    writing.kit.add(Entry(manifest.EMBEDDINGS_FILE, stream=stream, size=size, compress=False))


def _table(data, model: Model) -> np.ndarray:
    return np.frombuffer(data, "<f2").reshape(model.vocab_size, model.hidden_size)


def _compressed(path: str) -> bool:
    """Weights and tables are stored as they are (they do not deflate)."""
    return not path.endswith((".bin", ".f16"))


def _file(path: str, data: bytes) -> Entry:
    return Entry(path, data, compress=_compressed(path))


def _verify(
    kit: KitZip, tail: Mapping[str, bytes], meta: dict[str, Any], whole: WholeModel, vocab: int
) -> dict[str, Any]:
    """The kit run from what is written of it (programs read back when run, held within the
    largest program's weights) and the files held for after kit.json, under a draft kit.json:
    every digest but its own and the report's."""
    from app.kits.runner import Kit
    from app.kits.verify import DEFAULT_PROMPT_TOKENS, default_prompt, verify_kit

    draft = {**meta, "files": dict(sorted((kit.digests | manifest.digests(tail)).items()))}
    # ChainMap writes to its first map only; typeshed asks every map to be mutable
    files = ChainMap({manifest.KIT_JSON: manifest.to_bytes(draft)}, dict(tail), kit.files())  # type: ignore[arg-type]
    runner = Kit(files, being_written=True)
    count = min(DEFAULT_PROMPT_TOKENS, runner.context - 4)
    return verify_kit(runner, whole, default_prompt(vocab, max(count, 1)))


def _decoder_meta(build, layers: range, context: int, kv: str) -> dict[str, Any]:
    first = next(iter(build.parts.values())).params
    return {
        "layers": [layers.start, layers.stop - 1],
        "kv_cache": {
            "layers": list(layers),
            "shape": [1, first.kv_heads, context, first.dim],
            "dtype": "fp16",
            "where": "inputs k_cache_<i>, v_cache_<i>; new rows as outputs k_<i>, v_<i>"
            if kv == "io"
            else "ios18 states k_cache_<i>, v_cache_<i>, updated in place",
        },
    }


def _kit_json(
    model: Model,
    options: KitOptions,
    plan: Plan,
    programs: list[dict],
    context: int,
    prefill: int,
    base,
    tokenizer: list[str],
) -> dict[str, Any]:
    config = model.config
    return {
        "kit_version": manifest.KIT_VERSION,
        "architecture": {
            "model_type": config.get("model_type"),
            "architectures": config.get("architectures") or [],
            "num_hidden_layers": model.num_layers,
            "vocab_size": model.vocab_size,
            "tie_word_embeddings": model.tied,
            "max_position_embeddings": model.max_positions,
            **{
                k: v
                for k, v in base.model_dump(mode="json").items()
                if k
                not in (
                    "seq_len",
                    "mode",
                    "position_offset",
                    "cache_len",
                    "kv_cache",
                    "first_layer",
                    "num_layers",
                    "split",
                )
            },
            "head_dim": base.dim,
            "num_key_value_heads": base.kv_heads,
        },
        "format": options.format,
        "target": TARGET,
        "context": context,
        "prefill": prefill,
        "kv": options.kv,
        **({"kv_note": manifest.STATE_NOTE} if options.kv == "state" else {}),
        "quantize": (
            dict(options.quantize)
            if isinstance(options.quantize, Mapping) and options.quantize
            else options.quantize or None
        ),
        "programs": programs,
        "positions": manifest.POSITIONS,
        "embeddings": {
            "path": manifest.EMBEDDINGS_FILE,
            "shape": [model.vocab_size, model.hidden_size],
            "dtype": "fp16",
            "layout": "row-major, little-endian; "
            "an input x is the tokens' rows, transposed to [1, hidden, 1, T]",
        },
        "rope": {
            "path": manifest.ROPE_FILE,
            "shape": [2, context, base.dim],
            "dtype": "fp16",
            "layout": "cos then sin, row p for position p",
            "rope_theta": base.rope_theta,
            "rope_scaling": config.get("rope_scaling"),
        },
        "special_tokens": model.special_tokens(),
        "tokenizer": tokenizer,
        **_plan_json(plan),
    }


def _plan_json(plan: Plan) -> dict[str, Any]:
    """The kit's plan (the layout it was built from, and for a device its prediction) and, on
    their own, the plan's warnings: a quantization reported failing or not modelled, more
    compiled functions than a process keeps live."""
    planned = plan.to_json()
    warnings = planned.pop("warnings")
    return {"plan": planned, "warnings": warnings}


def build_kit(
    checkpoint: str | Path,
    output: str | Path,
    options: KitOptions = KitOptions(),
    progress: Progress | None = None,
    scratch: Path | None = None,
) -> KitResult:
    """Build the kit and write it to `output` atomically: nothing is left there on error.
    `scratch`: as for `write_kit_zip`."""
    output = Path(output)
    with atomic_file(output, readable=True) as f:
        meta, verification, seconds = write_kit_zip(checkpoint, options, f, progress, scratch)
    return KitResult(output, meta, output.stat().st_size, seconds, verification)


def model_zip(checkpoint: str | Path, **options: Any) -> bytes:
    """The Python API: a checkpoint folder's kit as zip bytes (options as KitOptions names).

    from app.kits import model_zip
    kit = model_zip("Llama-3.2-1B", format="mlmodelc", context=1024, prefill=64, verify=True)
    """
    with tempfile.TemporaryFile(prefix="kit-") as f:
        write_kit_zip(checkpoint, KitOptions(**options), f)
        f.seek(0)
        return f.read()


def write_kit(files: Mapping[str, bytes], out) -> None:
    """A kit's files (in memory) as its zip."""
    write_zip(out, [_file(p, d) for p, d in files.items()])
