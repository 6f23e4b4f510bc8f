"""A checkpoint folder -> a kit zip: plan, build every program, write the tables, copy the
tokenizer, verify when asked, then write kit.json (the digest of every file) and the zip.

Everything is checked before the zip is written, and the zip is written atomically: bad input
leaves nothing behind.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app import planner
from app.artifacts import weight_bytes
from app.errors import RequestError
from app.estimates import device_or_error
from app.files import atomic_file
from app.formats import KIT_FORMATS
from app.kernels.decoder_stack import layer_bytes
from app.kernels.rope import tables
from app.kits import manifest
from app.kits.model import Model, open_model
from app.kits.plan import Plan, make_plan
from app.kits.programs import (
    TARGET,
    Built,
    decoder_chunk,
    head_piece,
    program_entries,
    program_path,
    signature,
)
from app.kits.reference import WholeModel
from app.packaging import Entry, write_zip
from app.packaging.layout import VERIFICATION_JSON
from app.settings import Settings

Progress = Callable[[str], None]
DEFAULT_CONTEXT = 512
DEFAULT_PREFILL = 64


@dataclass(frozen=True)
class KitOptions:
    """What the CLI's flags and the Python API's keywords set (docs/kits.md)."""

    format: str = "mlpackage"
    context: int | None = None  # default min(512, max_position_embeddings)
    prefill: int | None = None  # default min(64, context)
    device: str | None = None
    quantize: Mapping[str, Any] | None = None  # {"layers": cfg, "head": cfg}, or cfg for layers
    kv: str = "io"
    verify: bool = False
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


def _quantize_parts(quantize: Mapping[str, Any] | None) -> tuple[Any, Any]:
    if quantize is None:
        return None, None
    if not isinstance(quantize, Mapping):
        raise RequestError("quantize", "a JSON object: a quantize config, or {layers, head}")
    if set(quantize) <= {"layers", "head"}:
        return quantize.get("layers"), quantize.get("head")
    return quantize, None


def _lengths(model: Model, options: KitOptions) -> tuple[int, int]:
    limit = model.max_positions or DEFAULT_CONTEXT
    context = options.context or min(DEFAULT_CONTEXT, limit)
    prefill = options.prefill or min(DEFAULT_PREFILL, context)
    if context < 1 or prefill < 1:
        raise RequestError("context" if context < 1 else "prefill", "a positive number of tokens")
    if prefill > context or context % prefill:
        raise RequestError("prefill", f"{prefill} tokens per chunk must divide the context of "
                           f"{context} (chunks start at multiples of it and must end within "
                           f"the cache); e.g. {math.gcd(context, prefill)}")  # fmt: skip
    return context, prefill


def _check_options(options: KitOptions) -> None:
    if options.format not in KIT_FORMATS:
        raise RequestError("format", f"{options.format!r}; one of {', '.join(KIT_FORMATS)}")
    if options.kv not in ("io", "state"):
        raise RequestError("kv", f"{options.kv!r}; io (cache as inputs/outputs) or state (ios18)")
    if options.device is not None:
        device_or_error(options.device)  # names the known devices


def _plan(model: Model, options: KitOptions, fp16_layer_bytes: int, layers_q: Any, context: int,
          prefill: int) -> Plan:  # fmt: skip
    """No device: the ANE_MAX_PROGRAM_WEIGHT_BYTES budget and the every-chip axis limit. A
    device: its per-program envelope (or the option, if lower) and its per-axis limit; layers
    counted at the precision the quantization stores them in, as the planner counts them, and
    the planner's prediction for the device recorded with the plan."""
    if options.device is None:
        budget = options.max_program_weight_bytes or Settings().max_program_weight_bytes
        return make_plan(model.num_layers, fp16_layer_bytes, model.vocab_size, model.hidden_size,
                         budget)  # fmt: skip
    chip = device_or_error(options.device)
    budget = min(chip.program_weight_bytes.value, options.max_program_weight_bytes or math.inf)
    try:
        predicted = planner.make_plan(model.config, chip.name, quantize=layers_q, context=context,
                                      prefill=prefill)  # fmt: skip
    except RequestError as exc:
        if not exc.field.startswith("quantize"):
            raise
        predicted = None  # a quantization the planner does not model: fp16 bytes, no prediction
    stored = fp16_layer_bytes
    if predicted is not None:
        stored = math.ceil(predicted.precision.stored_bytes(fp16_layer_bytes / 2))
    keep = ("path", "precision", "fits", "problems", "fits_with", "decode_tokens_per_s",
            "decode_tokens_per_s_range", "prefill_tokens_per_s", "prefill_tokens_per_s_range",
            "peak_memory_bytes", "first_load_bytes")  # fmt: skip
    prediction = None if predicted is None else {k: predicted.to_json()[k] for k in keep}
    return make_plan(model.num_layers, stored, model.vocab_size, model.hidden_size, int(budget),
                     chip.name, chip.axis_max.value, prediction)  # fmt: skip


def build_kit_files(checkpoint: str | Path, options: KitOptions = KitOptions(),
                    progress: Progress | None = None) -> KitResult:  # fmt: skip
    """Every file of the kit, in memory (kit.json last), not yet written anywhere."""
    started = time.perf_counter()
    say = progress or (lambda message: None)
    _check_options(options)
    model = open_model(checkpoint)
    context, prefill = _lengths(model, options)
    model.check_context(context)
    layers_q, head_q = _quantize_parts(options.quantize)
    base = model.stack_params(0, 1, seq_len=1)
    plan = _plan(model, options, layer_bytes(base), layers_q, context, prefill)
    files: dict[str, bytes] = {}
    built: list[Built] = []
    held: dict[str, np.ndarray] = {}  # the weights the programs compute with, for verification
    total = len(plan.layers) + len(plan.head)
    for k, layers in enumerate(plan.layers):
        name = f"decoder_{k}"
        say(f"[{k + 1}/{total}] {name}: layers {layers.start}-{layers.stop - 1}")
        stack = {key: v for key, v in model.decoder.items() if key in type(base).model_fields}
        stack |= {"first_layer": layers.start, "num_layers": len(layers)}
        weights = model.layer_weights(layers.start, len(layers))
        build = decoder_chunk(name, stack, weights, context=context, prefill=prefill,
                              kv=options.kv, quantize=layers_q)  # fmt: skip
        held |= build.program_weights
        built.append(Built(name, "decoder", build, _decoder_meta(build, layers, context,
                                                                 options.kv)))  # fmt: skip
        files |= _entries(build, options)
    embeddings = model.embeddings()
    norm, head = model.final_norm(), model.lm_head(embeddings)
    eps = float(model.decoder.get("rms_norm_eps", 1e-6))
    head_rows = []
    for k, rows in enumerate(plan.head):
        name = f"head_{k}"
        say(f"[{len(plan.layers) + k + 1}/{total}] {name}: vocabulary {rows.start}-{rows.stop - 1}")
        build = head_piece(name, model.hidden_size, eps, norm, head[rows.start : rows.stop], head_q)
        head_rows.append(build.program_weights["lm_head.weight"])
        built.append(Built(name, "head", build, {"vocab": [rows.start, rows.stop]}))
        files |= _entries(build, options)
    files[manifest.EMBEDDINGS_FILE] = np.ascontiguousarray(embeddings, "<f2").tobytes()
    cos, sin = tables(np.arange(context), base.dim, base.rope_theta, base.rope_scaling)
    files[manifest.ROPE_FILE] = np.stack([cos, sin]).astype("<f2").tobytes()
    tokenizer = model.tokenizer_files()
    for path in tokenizer:
        files[path.name] = path.read_bytes()
    meta = _kit_json(
        model, options, plan, built, context, prefill, base, [p.name for p in tokenizer]
    )
    verification = None
    if options.verify:
        say("verifying against the float64 model")
        whole = WholeModel(base, model.num_layers, held, embeddings, norm,
                           np.concatenate(head_rows).reshape(model.vocab_size, -1))  # fmt: skip
        verification = _verify(files, meta, whole, model.vocab_size)
        files[VERIFICATION_JSON] = manifest.to_bytes(verification)
        meta["verification"] = {k: verification[k] for k in ("passed",)} | {
            "logits_max_rel_error": verification["logits"]["max_rel_error"],
            "tolerance": verification["logits"]["tolerance"],
            "greedy_compared_steps": verification["greedy"]["compared_steps"],
        }
    meta["files"] = manifest.digests(files)
    files[manifest.KIT_JSON] = manifest.to_bytes(meta)
    size = sum(len(v) for v in files.values())
    return KitResult(None, meta, size, time.perf_counter() - started, verification, files)


def _verify(files: dict[str, bytes], meta: dict[str, Any], whole: WholeModel,
            vocab: int) -> dict[str, Any]:  # fmt: skip
    from app.kits.runner import Kit
    from app.kits.verify import DEFAULT_PROMPT_TOKENS, default_prompt, verify_kit

    draft = {**meta, "files": manifest.digests(files)}
    kit = Kit({**files, manifest.KIT_JSON: manifest.to_bytes(draft)})
    count = min(DEFAULT_PROMPT_TOKENS, kit.context - 4)
    return verify_kit(kit, whole, default_prompt(vocab, max(count, 1)))


def _entries(build, options: KitOptions) -> dict[str, bytes]:
    return {e.path: e.data or b"" for e in program_entries(build, options.format,
                                                          options.mlmodelc_profile)}  # fmt: skip


def _decoder_meta(build, layers: range, context: int, kv: str) -> dict[str, Any]:
    first = next(iter(build.parts.values())).params
    return {
        "layers": [layers.start, layers.stop - 1],
        "kv_cache": {
            "layers": list(layers),
            "shape": [1, first.kv_heads, context, first.dim],
            "dtype": "fp16",
            "where": "inputs k_cache_<i>, v_cache_<i>; new rows as outputs k_<i>, v_<i>"
            if kv == "io" else "ios18 states k_cache_<i>, v_cache_<i>, updated in place",
        },
    }  # fmt: skip


def _kit_json(model: Model, options: KitOptions, plan: Plan, built: list[Built], context: int,
              prefill: int, base, tokenizer: list[str]) -> dict[str, Any]:  # fmt: skip
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
        "quantize": dict(options.quantize) if options.quantize else None,
        "programs": [
            {
                "name": b.name,
                "role": b.role,
                "path": program_path(b.name, options.format),
                "weight_bytes": weight_bytes(b.build),
                "functions": signature(b.build),
                **b.describe,
            }
            for b in built
        ],
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
        "plan": plan.to_json(),
    }


def build_kit(checkpoint: str | Path, output: str | Path, options: KitOptions = KitOptions(),
              progress: Progress | None = None) -> KitResult:  # fmt: skip
    """Build the kit and write it to `output` atomically."""
    result = build_kit_files(checkpoint, options, progress)
    output = Path(output)
    with atomic_file(output) as f:
        write_kit(result.files, f)
    return KitResult(output, result.meta, output.stat().st_size, result.seconds,
                     result.verification)  # fmt: skip


def model_zip(checkpoint: str | Path, **options: Any) -> bytes:
    """The Python API: a checkpoint folder's kit as zip bytes (options as KitOptions names).

    from app.kits import model_zip
    kit = model_zip("Llama-3.2-1B", format="mlmodelc", context=1024, prefill=64, verify=True)
    """
    import io

    result = build_kit_files(checkpoint, KitOptions(**options))
    buffer = io.BytesIO()
    write_kit(result.files, buffer)
    return buffer.getvalue()


def write_kit(files: Mapping[str, bytes], out) -> None:
    """The zip; weights and tables stored as they are (they do not deflate)."""
    write_zip(out, [Entry(p, d, compress=not p.endswith((".bin", ".f16")))
                    for p, d in files.items()])  # fmt: skip
