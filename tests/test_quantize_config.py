"""Bad quantization configs fail before any work, with a QuantizeConfigError naming the field."""

import re

import numpy as np
import pytest

from app.quantize import (
    LinearConfig,
    PalettizeConfig,
    PruneConfig,
    QuantizeConfigError,
    parse_config,
)
from app.quantize.compress import quantize

W = np.random.default_rng(0).standard_normal((24, 36, 1, 1)).astype(np.float32)

BAD = [
    ({"mode": "palettize", "nbits": 5}, "ios18", "quantize.nbits", "not one of 1, 2, 3, 4, 6, 8"),
    ({"mode": "palettize", "nbits": 0}, "ios18", "quantize.nbits", "not one of"),
    ({"mode": "palettize", "nbits": 3}, "ios17", "quantize.nbits", "3-bit palettes need ios18"),
    (
        {"mode": "palettize", "nbits": 4, "granularity": "per_channel"},
        "ios18",
        "quantize.granularity",
        "not one of per_tensor, per_grouped_channel",
    ),
    (
        {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 5},
        "ios18",
        "quantize.group_size",
        "5 does not divide 24 channels",
    ),
    (
        {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 0},
        "ios18",
        "quantize.group_size",
        "must be a positive integer",
    ),
    (
        {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 4},
        "ios17",
        "quantize.granularity",
        "per_grouped_channel needs ios18",
    ),
    ({"mode": "linear", "dtype": "int16"}, "ios18", "quantize.dtype", "not one of int8"),
    ({"mode": "linear", "dtype": "int4"}, "ios17", "quantize.dtype", "int4 needs ios18"),
    ({"mode": "linear", "dtype": "uint4"}, "ios17", "quantize.dtype", "uint4 needs ios18"),
    (
        {"mode": "linear", "granularity": "per_block", "block_size": 8},
        "ios18",
        "quantize.block_size",
        "8 does not divide the input dimension 36",
    ),
    (
        {"mode": "linear", "granularity": "per_block", "block_size": 4},
        "ios17",
        "quantize.granularity",
        "per_block needs ios18",
    ),
    ({"mode": "linear", "granularity": "per_group"}, "ios18", "quantize.granularity", "not one of"),
    ({"mode": "prune", "target_sparsity": 0}, "ios18", "quantize.target_sparsity", "not in (0, 1)"),
    ({"mode": "prune", "target_sparsity": 1}, "ios18", "quantize.target_sparsity", "not in (0, 1)"),
    ({"mode": "prune", "target_sparsity": -0.5}, "ios18", "quantize.target_sparsity", "not in"),
    (
        {"mode": "prune", "target_sparsity": 0.5, "dtype": "int4"},
        "ios18",
        "quantize.dtype",
        "not one of int8",
    ),
    (
        {"mode": "prune", "target_sparsity": 0.5, "dtype": "int8"},
        "ios17",
        "quantize.dtype",
        "need ios18",
    ),
]


@pytest.mark.parametrize(("config", "target", "field", "message"), BAD)
def test_bad_config_names_its_field(config, target, field, message):
    with pytest.raises(QuantizeConfigError, match=re.escape(message)) as info:
        quantize(W, parse_config(config), target)
    assert info.value.field == field
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"nbits": 4}, "quantize.mode"),
        ({"mode": "cluster"}, "quantize.mode"),
        ({"mode": "palettize"}, "quantize.nbits"),
        ({"mode": "prune"}, "quantize.target_sparsity"),
        ({"mode": "palettize", "nbits": 4, "block_size": 8}, "quantize.block_size"),
        ({"mode": "palettize", "nbits": "4"}, "quantize.nbits"),
        ({"mode": "palettize", "nbits": True}, "quantize.nbits"),
        ({"mode": "linear", "symmetric": 1}, "quantize.symmetric"),
        ({"mode": "prune", "target_sparsity": "half"}, "quantize.target_sparsity"),
        ([1, 2], "quantize"),
    ],
)
def test_parse_config_names_the_field(data, field):
    with pytest.raises(QuantizeConfigError) as info:
        parse_config(data)
    assert info.value.field == field


def test_parse_config_defaults_follow_coremltools_optimize():
    assert parse_config({"mode": "palettize", "nbits": 6}) == PalettizeConfig(6, "per_tensor", 32)
    assert parse_config({"mode": "linear"}) == LinearConfig("int8", "per_channel", 32, True)
    assert parse_config({"mode": "prune", "target_sparsity": 0.25}) == PruneConfig(0.25, None)
    assert parse_config({"mode": "linear"}, field="nodes.ffn.quantize") == LinearConfig()


def test_the_field_prefix_is_the_callers():
    with pytest.raises(QuantizeConfigError) as info:
        quantize(W, PalettizeConfig(5), field="nodes.up.quantize")
    assert info.value.field == "nodes.up.quantize.nbits"


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]], np.float32), "not finite"),
        (np.array([[1e6, 0.0], [0.0, 1.0]], np.float32), "not finite in fp16"),
        (np.ones((2, 2), np.int32), "must hold floats"),
    ],
)
def test_weights_that_cannot_be_quantized_name_the_weight(weight, message):
    with pytest.raises(QuantizeConfigError, match=message) as info:
        quantize(weight, LinearConfig(), weight_field="weights.weight")
    assert info.value.field == "weights.weight"


def test_a_rank_one_weight_is_refused():
    with pytest.raises(QuantizeConfigError, match="rank 2 or more") as info:
        quantize(np.ones(16, np.float32), LinearConfig())
    assert info.value.field == "quantize"


def test_pruning_everything_is_refused():
    with pytest.raises(QuantizeConfigError, match="prunes every weight") as info:
        quantize(np.zeros((4, 4), np.float32), PruneConfig(0.5))
    assert info.value.field == "quantize.target_sparsity"
