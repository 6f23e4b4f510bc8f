"""A `save_pretrained` folder read as a causal LM a kit can be built from: its architecture
checked against the ones the kits support, its decoder params, where every tensor is (checked
against the config before any is read), its special tokens and its tokenizer files.

Supported: Llama (with Llama 3.x `rope_scaling`), Mistral, Qwen2 (q/k/v biases) and Qwen3
(per-head q/k RMSNorm, explicit `head_dim`), tied or untied heads. Every fault is a RequestError
naming the file, tensor or config key, and saying what would work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from app.checkpoints.config import (
    CAUSAL_LMS,
    SpecialTokens,
    check_window,
    json_limits,
    params_from_config,
    read_config,
)
from app.checkpoints.files import INDEX_NAME, SINGLE_NAME, Tensor, open_checkpoint
from app.checkpoints.load import ConvertedOnRead, convert_all, layer_prefix, locate
from app.core.jsonfile import read_model
from app.errors import RequestError
from app.kernels.decoder_stack import DecoderStackParams

ARCHITECTURES = CAUSAL_LMS  # model_type -> the class name transformers gives its causal LM
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
)
STACK = "decoder_stack"


@dataclass(frozen=True)
class Model:
    """A checkpoint folder, understood: nothing is read beyond the headers until asked."""

    folder: Path
    config: dict[str, Any]
    decoder: dict[str, Any]  # decoder_stack params the config sets (no layers, modes, lengths)
    num_layers: int
    vocab_size: int
    tied: bool
    tensors: dict[str, Tensor]
    prefix: str  # what precedes `layers.<i>.` in the tensor names (`model.`)
    generation: dict[str, Any] = field(default_factory=dict)  # generation_config.json, checked

    @property
    def hidden_size(self) -> int:
        return int(self.decoder["hidden_size"])

    @property
    def max_positions(self) -> int | None:
        value = self.config.get("max_position_embeddings")
        return int(value) if value is not None else None

    def stack_params(self, first: int, count: int, **call: Any) -> DecoderStackParams:
        fields = DecoderStackParams.model_fields
        params = {k: v for k, v in self.decoder.items() if k in fields}
        try:
            return DecoderStackParams.model_validate(
                params | {"first_layer": first, "num_layers": count} | call
            )
        except ValueError as exc:
            raise RequestError("config", f"{self.folder / 'config.json'}: {exc}") from None

    def layer_weights(
        self, first: int, count: int, on_read: bool = False
    ) -> Mapping[str, np.ndarray]:
        """The fp16 weights of layers first .. first + count − 1, named `layers.<i>.<tensor>`:
        converted now, or, `on_read`, each converted when it is read (for a program that
        compresses them one by one: app/checkpoints/load.py, ConvertedOnRead)."""
        parsed = self.stack_params(first, count, seq_len=1)
        located = locate(STACK, parsed, self.tensors, first, self.prefix)
        if on_read:
            return ConvertedOnRead(located)
        weights, _ = convert_all(located)
        return weights

    def _found(self, name: str, shape: tuple[int, ...]) -> Tensor:
        found = self.tensors.get(name)
        if found is None:
            raise RequestError(
                "checkpoint",
                f"tensor {name!r} is missing from {self.folder}",
                title="Checkpoint and config disagree",
            )
        if found.shape != shape:
            raise RequestError(
                "checkpoint",
                f"tensor {name!r} has shape {list(found.shape)}; the config gives {list(shape)}",
                title="Checkpoint and config disagree",
            )
        return found

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """One whole-model tensor (embeddings, final norm, lm_head) in fp16, its shape checked."""
        values, _ = convert_all({name: self._found(name, shape)})
        return values[name]

    def tensor_rows(self, name: str, shape: tuple[int, ...], rows: range) -> np.ndarray:
        """Rows `rows` of a whole-model matrix in fp16, read from those rows alone: a table of
        the vocabulary's size is never converted whole."""
        found = self._found(name, shape)
        row_bytes = found.nbytes // shape[0]
        part = replace(
            found, offset=found.offset + rows.start * row_bytes, shape=(len(rows), *shape[1:])
        )
        values, _ = convert_all({name: part})
        return values[name]

    def embeddings(self) -> np.ndarray:
        return self.tensor(f"{self.prefix}embed_tokens.weight", (self.vocab_size, self.hidden_size))

    def embedding_rows(self, rows: range) -> np.ndarray:
        return self.tensor_rows(
            f"{self.prefix}embed_tokens.weight", (self.vocab_size, self.hidden_size), rows
        )

    def final_norm(self) -> np.ndarray:
        return self.tensor(f"{self.prefix}norm.weight", (self.hidden_size,))

    def lm_head(self, embeddings: np.ndarray) -> np.ndarray:
        """The head's [vocab, hidden] matrix: the embeddings themselves when tied."""
        if self.tied:
            return embeddings
        return self.tensor("lm_head.weight", (self.vocab_size, self.hidden_size))

    def head_rows(self, rows: range) -> np.ndarray:
        """Rows of the head's matrix: the embeddings' when tied."""
        if self.tied:
            return self.embedding_rows(rows)
        return self.tensor_rows("lm_head.weight", (self.vocab_size, self.hidden_size), rows)

    def check_tensors(self) -> None:
        """Every tensor the kit will read, present with the config's shape (headers only)."""
        parsed = self.stack_params(0, self.num_layers, seq_len=1)
        locate(STACK, parsed, self.tensors, 0, self.prefix)
        shape = (self.vocab_size, self.hidden_size)
        wanted = {
            f"{self.prefix}embed_tokens.weight": shape,
            f"{self.prefix}norm.weight": (self.hidden_size,),
        }
        if not self.tied:
            wanted["lm_head.weight"] = shape
        for name, expected in wanted.items():
            found = self.tensors.get(name)
            if found is None:
                hint = " (or set tie_word_embeddings)" if name == "lm_head.weight" else ""
                raise RequestError(
                    "checkpoint",
                    f"tensor {name!r} is missing from {self.folder}{hint}",
                    title="Checkpoint and config disagree",
                )
            if found.shape != expected:
                raise RequestError(
                    "checkpoint",
                    f"tensor {name!r} has shape {list(found.shape)}; "
                    f"the config gives {list(expected)}",
                    title="Checkpoint and config disagree",
                )

    def check_context(self, context: int) -> None:
        """`context` (positions the kit's cache holds) within max_position_embeddings and the
        sliding window."""
        limit = self.max_positions
        if limit is not None and context > limit:
            raise RequestError(
                "context",
                f"{context} positions is over the model's "
                f"max_position_embeddings of {limit} ({self.folder / 'config.json'}"
                f"); ask for at most {limit}",
            )
        check_window(self.config, context)

    def special_tokens(self) -> dict[str, Any]:
        """bos/eos/pad ids from config.json, then generation_config.json over them."""
        found = {k: self.config.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
        found |= {k: self.generation[k] for k in found if self.generation.get(k) is not None}
        return {k: v for k, v in found.items() if v is not None}

    def tokenizer_files(self) -> list[Path]:
        return [self.folder / n for n in TOKENIZER_FILES if (self.folder / n).is_file()]


def _generation_config(folder: Path) -> dict[str, Any]:
    """generation_config.json's token ids, checked (bounded, strict), or {} without one."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return {}
    read = read_model(
        path, SpecialTokens, str(path), field="generation_config", limits=json_limits()
    )
    return read.model_dump(
        exclude_none=True, include={"bos_token_id", "eos_token_id", "pad_token_id"}
    )


def architecture(config: Mapping[str, Any], where: Path) -> str:
    """The config's model_type, when the kits build it; refused naming both keys otherwise."""
    model_type = config.get("model_type")
    names = config.get("architectures") or []
    known = ", ".join(f"{t} ({a})" for t, a in ARCHITECTURES.items())
    if model_type not in ARCHITECTURES:
        raise RequestError(
            "config.model_type",
            f"{where}: model_type {model_type!r} "
            f"(architectures {names}) is not one the kits build; they build "
            f"{known}",
            title="Unsupported architecture",
        )
    if names and ARCHITECTURES[model_type] not in names:
        raise RequestError(
            "config.architectures",
            f"{where}: architectures {names} is not "
            f"{ARCHITECTURES[model_type]}, the causal LM of model_type "
            f"{model_type!r}",
            title="Unsupported architecture",
        )
    return model_type


def _weights_file(folder: Path) -> Path:
    """The safetensors file (or index) of a folder; a folder of PyTorch pickles only is named."""
    for name in (INDEX_NAME, SINGLE_NAME):
        if (folder / name).is_file():
            return folder / name
    pickles = sorted(p.name for p in folder.glob("pytorch_model*.bin"))
    if pickles:
        raise RequestError(
            "checkpoint",
            f"{folder} holds {pickles[0]} only: kits read safetensors "
            "(save it again with save_pretrained(..., safe_serialization=True))",
            title="Unreadable checkpoint",
        )
    raise RequestError(
        "checkpoint",
        f"{folder} holds neither {SINGLE_NAME} nor {INDEX_NAME}",
        title="Unreadable checkpoint",
    )


def _integer(config: Mapping[str, Any], key: str, where: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestError(f"config.{key}", f"{where}: a positive integer is needed, got {value!r}")
    return value


def open_model(folder: str | Path) -> Model:
    """The checkpoint folder read as a supported causal LM, every tensor checked (headers)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RequestError(
            "checkpoint",
            f"{folder} is not a directory (a save_pretrained folder: "
            "config.json, model.safetensors, tokenizer files)",
        )
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise RequestError("checkpoint", f"{config_path}: no such file")
    config = read_config(config_path)
    architecture(config, config_path)
    decoder = params_from_config(config)
    if "intermediate_size" not in decoder:
        raise RequestError("config.intermediate_size", f"{config_path}: missing")
    layers = _integer(config, "num_hidden_layers", config_path)
    vocab = _integer(config, "vocab_size", config_path)
    tensors = open_checkpoint(_weights_file(folder))
    tied = bool(config.get("tie_word_embeddings", False))
    generation = _generation_config(folder)
    model = Model(
        folder, config, decoder, layers, vocab, tied, tensors, layer_prefix(tensors), generation
    )
    model.check_tensors()
    return model
