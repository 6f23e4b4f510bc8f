"""`compile OP --checkpoint ... --config ... --layers ...`: an op's params and weights read from a
Hugging Face checkpoint (app/checkpoints) instead of --params and --weights files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.checkpoints import load
from app.cli.common import CLIError
from app.errors import FieldError


def add_arguments(parser) -> None:
    parser.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="model.safetensors, model.safetensors.index.json (shards) or their directory: the "
        "op's weights by their Hugging Face names",
    )
    parser.add_argument(
        "--config",
        metavar="CONFIG.JSON",
        help="the model's config.json (default: beside the checkpoint)",
    )
    parser.add_argument(
        "--layers",
        "--layer",
        dest="layers",
        metavar="I or I-J",
        help="the layer (3) or, for decoder_stack, the inclusive range (0-15)",
    )


def from_checkpoint(
    args, params: dict, weights: dict[str, np.ndarray]
) -> tuple[dict, dict[str, np.ndarray]]:
    """(params, weights) with the checkpoint's: the config's params under --params, the layer's
    tensors in fp16 beside any --weights."""

    if args.checkpoint is None:
        if args.config or args.layers:
            raise CLIError("--config and --layers go with --checkpoint")
        return params, weights
    if args.layers is None:
        raise CLIError("--checkpoint needs --layers (a layer, or a range for decoder_stack)")
    if args.random_weights is not None:
        raise CLIError("--random-weights and --checkpoint exclude each other")
    checkpoint = Path(args.checkpoint)
    config = (
        args.config or (checkpoint if checkpoint.is_dir() else checkpoint.parent) / "config.json"
    )
    try:
        loaded = load(args.op, checkpoint, config, args.layers, params)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    return loaded.params, {**loaded.weights, **weights}
