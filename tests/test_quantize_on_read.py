"""Weights compressed as they are read (app/kernels/weight_check.py, WeightsOnRead): a quantized
package built from weights read on demand is the package built from the same weights in memory,
each weight is read once to be compressed (not once per function), and a quantized kit (whose
decoder layers are read this way) is byte for byte the kit built from its layers converted up
front."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from kit_support import KIT_QWEN3, write_model

from app.catalog_build import build_functions
from app.errors import RequestError
from app.kernels.weight_check import WeightsOnRead
from app.kits import model_zip
from app.kits.causal_lm import Model
from app.packaging.bundle import program_files

STACK = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "first_layer": 0,
    "num_layers": 2,
    "mode": "decode",
    "cache_len": 8,
}
FUNCTIONS = {"prefill": {"seq_len": 4}, "decode": {"seq_len": 1}}


class Counted(WeightsOnRead):
    """Arrays in memory, handed out as copies (as a checkpoint's conversion makes new ones),
    each read counted."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays, self.reads = arrays, dict.fromkeys(arrays, 0)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.arrays[name].shape

    def __getitem__(self, name: str) -> np.ndarray:
        self.reads[name] += 1
        return self.arrays[name].copy()

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


def stack_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """decoder_stack's weights at STACK's shape, drawn as the catalog draws them."""
    from app.kernels import get_op, parse_params
    from app.kernels.weight_check import random_weights

    op = get_op("decoder_stack")
    return random_weights(op.weights(parse_params(op, {**STACK, "seq_len": 1})), seed)


def files_of(build) -> dict[str, bytes]:
    out = {}
    for entry in program_files(build, "mlpackage").entries:
        if entry.data is None:
            buffer = io.BytesIO()
            entry.stream(buffer)
            out[entry.path] = buffer.getvalue()
        else:
            out[entry.path] = entry.data
    return out


CONFIGS = [
    {"mode": "palettize", "nbits": 4},
    {"mode": "palettize", "nbits": 2, "granularity": "per_grouped_channel", "group_size": 8},
    {"mode": "linear", "dtype": "int8"},
    {"mode": "prune", "target_sparsity": 0.5},
]


@pytest.mark.parametrize("quantize", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_package_from_weights_read_on_demand_is_the_package_in_memory(quantize):
    arrays = stack_weights()
    on_read = Counted(arrays)
    kwargs = {"target": "ios18", "name": "stack", "quantize": quantize}
    streamed = build_functions("decoder_stack", STACK, FUNCTIONS, on_read, **kwargs)
    quantized = set(streamed.quantized)
    assert quantized and quantized < set(arrays)  # the norms stay fp16
    # each weight read once while building: compressed once for both functions, held or not
    assert on_read.reads == dict.fromkeys(arrays, 1)
    in_memory = build_functions("decoder_stack", STACK, FUNCTIONS, arrays, **kwargs)
    assert files_of(streamed) == files_of(in_memory)  # kernel.json reads each weight again
    assert all(on_read.reads[k] == (2 if k in quantized else 1) for k in arrays)


def test_a_weight_read_on_demand_is_validated_when_read():
    arrays = stack_weights()
    bad = next(k for k in arrays if k.endswith("q_proj.weight"))
    arrays[bad][0, 0] = np.inf
    with pytest.raises(RequestError) as caught:
        build_functions(
            "decoder_stack",
            STACK,
            FUNCTIONS,
            Counted(arrays),
            target="ios18",
            quantize={"mode": "palettize", "nbits": 4},
        )
    assert caught.value.field == f"functions.prefill.weights.{bad}"


def test_shapes_are_checked_before_any_weight_is_read():
    arrays = stack_weights()
    name = next(k for k in arrays if k.endswith("down_proj.weight"))
    arrays[name] = arrays[name][:, :-1]
    on_read = Counted(arrays)
    with pytest.raises(RequestError, match="expected shape"):
        build_functions(
            "decoder_stack",
            STACK,
            FUNCTIONS,
            on_read,
            target="ios18",
            quantize={"mode": "palettize", "nbits": 4},
        )
    assert not any(on_read.reads.values())


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("ckpt") / "qwen3", KIT_QWEN3, seed=2)


@pytest.mark.parametrize("quantize", CONFIGS[:3], ids=lambda c: c["mode"])
def test_quantized_kit_is_the_kit_of_its_layers_in_memory(qwen3, monkeypatch, quantize):
    # the layers are what is read on demand; the head (260 rows: no whole groups of 8) stays fp16
    options = {"format": "mil", "context": 16, "prefill": 4, "quantize": {"layers": quantize}}
    streamed = model_zip(qwen3, **options)
    read_up_front = Model.layer_weights
    monkeypatch.setattr(
        Model,
        "layer_weights",
        lambda self, first, count, on_read=False: read_up_front(self, first, count),
    )
    assert model_zip(qwen3, **options) == streamed
