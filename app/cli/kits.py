"""`ane-kernels model CHECKPOINT_DIR -o KIT.zip` builds a model kit (app/kits); `ane-kernels
generate KIT.zip --prompt-ids 1,2,3 --max-new-tokens N [--json]` runs one from its zip alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.cli.common import EXIT_FAILED, CLIError
from app.cli.summary import BuildSummary, emit
from app.errors import FieldError
from app.files import remove_in_flight_on_stop
from app.formats import KIT_FORMATS
from app.kits import Kit, KitOptions, build_kit


def cmd_model(args) -> int:

    quantize = None
    if args.quantize is not None:
        try:
            quantize = json.loads(args.quantize)
        except json.JSONDecodeError as exc:
            raise CLIError(f"--quantize is not valid JSON: {exc}") from None
    options = KitOptions(
        format=args.format,
        context=args.context,
        prefill=args.prefill,
        device=args.device,
        quantize=quantize,
        kv=args.kv,
        verify=args.verify,
    )
    remove_in_flight_on_stop()  # SIGTERM or Ctrl-C: the half-written kit and its scratch go too
    tty = sys.stderr.isatty()
    progress = (
        (lambda line: print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True))
        if tty
        else None
    )
    try:
        result = build_kit(args.checkpoint, args.output, options, progress)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    emit(summary(result), args.json)
    verification = result.verification
    return EXIT_FAILED if verification is not None and not verification["passed"] else 0


def summary(result) -> BuildSummary:
    """One screen: the model, the programs with their bytes, the plan, the preflight's findings
    (as `compile` prints them), the verification."""
    meta = result.meta
    arch = meta["architecture"]
    details = [
        f"built in {result.seconds:.1f} s",
        f"model: {arch['model_type']}: {arch['num_hidden_layers']} layers, hidden "
        f"{arch['hidden_size']}, vocabulary {arch['vocab_size']}"
        f"{' (tied head)' if arch['tie_word_embeddings'] else ''}",
        f"kit: {meta['format']}, context {meta['context']}, prefill chunks of "
        f"{meta['prefill']}, kv {meta['kv']}",
        f"plan: {meta['plan']['max_program_weight_bytes']} bytes per program, axis limit "
        f"{meta['plan']['axis_limit']}"
        f"{' for ' + meta['plan']['device'] if meta['plan'].get('device') else ''}",
    ]
    predicted = meta["plan"].get("prediction")
    if predicted is not None:
        fits = (
            "fits"
            if predicted["fits"]
            else "does NOT fit: " + "; ".join(p["message"] for p in predicted["problems"])
        )
        details.append(
            f"predicted {predicted['decode_tokens_per_s']} tokens/s decode, "
            f"{predicted['prefill_tokens_per_s']} tokens/s prefill, peak memory "
            f"{predicted['peak_memory_bytes']} bytes at {predicted['precision']}; {fits}"
        )
    for p in meta["programs"]:
        what = (
            f"layers {p['layers'][0]}-{p['layers'][1]}"
            if p["role"] == "decoder"
            else f"vocabulary {p['vocab'][0]}-{p['vocab'][1] - 1}"
        )
        details.append(f"  {p['path']:<24} {what:<24} {p['weight_bytes']:>12} weight bytes")
    verification = meta.get("verification")
    checked = None
    if verification is None:
        details.append("verify: not asked for (--verify)")
    else:
        details.append(f"greedy tokens compared for {verification['greedy_compared_steps']} steps")
        checked = {
            "passed": verification["passed"],
            "max_rel_error": verification["logits_max_rel_error"],
            "tolerance": verification["tolerance"],
        }
    return BuildSummary(
        str(result.path),
        result.size,
        details=details,
        preflight=kit_findings(meta),
        verification=checked,
    )


def kit_findings(meta: dict) -> list[dict]:
    """Every program's preflight findings, in run order, each node named `<program>.<node>`."""
    return [
        {**finding, "node": f"{p['name']}.{finding['node']}"}
        for p in meta["programs"]
        for finding in p.get("preflight", ())
    ]


def _ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise CLIError(f"--prompt-ids takes comma-separated token ids, got {text!r}") from None


def cmd_generate(args) -> int:

    if args.prompt_ids is None and args.prompt is None:
        raise CLIError("give --prompt-ids 1,2,3 (or --prompt TEXT with tokenizers installed)")
    if not Path(args.kit).is_file():
        raise CLIError(f"{args.kit}: no such file")
    try:
        kit = Kit.open(args.kit)
        tokenizer = _tokenizer(kit) if args.prompt_ids is None else None
        prompt = _ids(args.prompt_ids) if tokenizer is None else tokenizer.encode(args.prompt).ids
        stop = kit.manifest.special_tokens.eos_token_id
        stop = stop if isinstance(stop, list) else [] if stop is None else [stop]
        tokens, logits = kit.generate(prompt, args.max_new_tokens, stop)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    # text in, text out: the new tokens through the same tokenizer
    text = None if tokenizer is None else tokenizer.decode(tokens)
    if args.json:
        rows = [[float(v) for v in row] for row in logits]
        print(
            json.dumps(
                {"tokens": tokens, "logits": rows, **({"text": text} if text is not None else {})}
            )
        )
    else:
        print(" ".join(str(t) for t in tokens) if text is None else text)
    return 0


def _tokenizer(kit):
    """The kit's own tokenizer.json, read with the tokenizers package (when installed)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CLIError("--prompt needs the tokenizers package; pass --prompt-ids") from None
    if kit.tokenizer is None:
        raise CLIError("the kit holds no tokenizer.json; pass --prompt-ids")
    return Tokenizer.from_str(str(kit.tokenizer, "utf-8"))


def add_commands(sub) -> None:
    model = sub.add_parser("model", help="build a model kit from a Hugging Face checkpoint folder")
    model.add_argument(
        "checkpoint",
        metavar="CHECKPOINT_DIR",
        help="a save_pretrained folder: config.json, safetensors, tokenizer files",
    )
    model.add_argument("-o", "--output", required=True, metavar="KIT.zip")
    model.add_argument("--format", choices=KIT_FORMATS, default="mlpackage")
    model.add_argument("--context", type=int, help="positions the KV cache holds (default 512)")
    model.add_argument("--prefill", type=int, help="tokens per prefill chunk (default 64)")
    model.add_argument(
        "--device",
        help="the device to plan for: its per-axis limit and "
        "per-program envelope (default: no device, 16,384 axis)",
    )
    model.add_argument(
        "--quantize",
        metavar="JSON",
        help='a quantize config for the layers, or {"layers": ..., "head": ...}',
    )
    model.add_argument(
        "--kv",
        choices=["io", "state"],
        default="io",
        help="KV cache as inputs/outputs (io, every target) or ios18 state",
    )
    model.add_argument(
        "--verify",
        action="store_true",
        help="compare the kit's logits with the float64 model (verification.json)",
    )
    model.add_argument("--json", action="store_true", help="the build summary as one JSON object")
    model.set_defaults(run=cmd_model)

    gen = sub.add_parser("generate", help="run a model kit greedily with the numerical reference")
    gen.add_argument("kit", metavar="KIT.zip")
    gen.add_argument("--prompt-ids", help="comma-separated token ids")
    gen.add_argument(
        "--prompt",
        help="text, through the kit's tokenizer.json (needs tokenizers); the new tokens are "
        "printed as text too",
    )
    gen.add_argument("--max-new-tokens", type=int, default=16)
    gen.add_argument(
        "--json",
        action="store_true",
        help='print {"tokens": [...], "logits": [[...] per new token]}',
    )
    gen.set_defaults(run=cmd_generate)
