"""Weights from safetensors checkpoints (app/checkpoints) and the CLI's --checkpoint: F32, F16 and
BF16 tensors, one file or shards, converted to fp16 exactly as NumPy's cast would; overflow
counted per tensor and refused; every checkpoint/config mismatch named before anything is
written."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from checkpoint_support import (
    LLAMA,
    from_bf16_bits,
    layer_weights,
    random_tensors,
    write_checkpoint,
    write_safetensors,
)

from app.checkpoints import load, params_from_config, parse_layers
from app.checkpoints.convert import to_fp16
from app.checkpoints.files import Mapped, open_checkpoint
from app.cli import main
from app.errors import RequestError
from app.reference.validation import validate
from app.reference.verify import verify_build


@pytest.mark.parametrize(
    ("dtype", "shards"), [("float32", 1), ("bfloat16", 1), ("float16", 2), ("bfloat16", 3)]
)
def test_a_layer_loads_as_the_stored_values_cast_to_fp16(tmp_path, dtype, shards):
    path, config, tensors = write_checkpoint(tmp_path, LLAMA, dtype=dtype, shards=shards)
    loaded = load("decoder_layer", path, config, 1, {"seq_len": 4})
    expected = layer_weights(tensors, 1)
    assert set(loaded.weights) == set(expected) - {"model.norm.weight"}
    for name, values in loaded.weights.items():
        assert values.dtype == np.float16
        want = expected[name].astype(np.float16)
        assert np.array_equal(values.reshape(want.shape).view(np.uint16), want.view(np.uint16))
        assert loaded.sources[name] == f"model.layers.1.{name}"
    assert loaded.params["num_key_value_heads"] == 2 and loaded.params["seq_len"] == 4
    assert loaded.params["rope_scaling"]["rope_type"] == "llama3"


def test_every_bf16_value_converts_as_numpy_casts_its_float32(tmp_path):
    """All 65,536 bf16 bit patterns: the bit-moving fast path and the fallback agree bit for bit
    with NumPy's float32 -> float16 cast on every finite value; overflow is counted, NaN/inf
    refused."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    values = from_bf16_bits(bits)
    finite = np.isfinite(values)
    path = tmp_path / "all.safetensors"
    write_safetensors(path, {"finite": values[finite]}, "bfloat16")
    tensor = open_checkpoint(path)["finite"]
    with Mapped() as mapped:
        converted = to_fp16(tensor, mapped)
    with np.errstate(over="ignore"):
        expected = values[finite].astype(np.float16)
    assert np.array_equal(converted.values.view(np.uint16), expected.view(np.uint16))
    assert converted.overflow == int(np.count_nonzero(np.abs(values[finite]) >= 65520))
    write_safetensors(path, {"bad": values[~finite][:5]}, "bfloat16")
    with Mapped() as mapped, pytest.raises(RequestError, match="'bad' holds 5 NaN"):
        to_fp16(open_checkpoint(path)["bad"], mapped)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_overflow_is_reported_per_tensor_not_clipped(tmp_path, dtype):
    tensors = random_tensors(LLAMA)
    tensors["model.layers.0.mlp.down_proj.weight"][0, :3] = [7e4, -1e5, 65519.0]
    tensors["model.layers.0.self_attn.o_proj.weight"][1, 1] = 2e5
    path, config, _ = write_checkpoint(tmp_path, LLAMA, dtype=dtype, tensors=tensors)
    with pytest.raises(RequestError) as err:
        load("decoder_layer", path, config, 0, {"seq_len": 2})
    over = err.value.extra["overflow"]
    # 65519 rounds to 65504 in fp16 (and bf16 stores it as 65280): only |x| >= 65520 overflows
    assert over == {
        "model.layers.0.mlp.down_proj.weight": 2,
        "model.layers.0.self_attn.o_proj.weight": 1,
    }
    assert "mlp.down_proj.weight: 2" in err.value.message
    load("decoder_layer", path, config, 1, {"seq_len": 2})  # the other layers are fine


def _config(tmp_path, **change):
    config = {**LLAMA, **change}
    path = tmp_path / "changed.json"
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return path


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"num_attention_heads": 5}, "params.num_attention_heads", "do not divide hidden_size"),
        ({"num_key_value_heads": 3}, "params.num_key_value_heads", "do not divide"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            "config.rope_scaling.rope_type",
            "'yarn' is not supported",
        ),
        ({"hidden_act": "gelu_new"}, "config.hidden_act", "not supported"),
        (
            {"intermediate_size": 50},
            "checkpoint",
            "'model.layers.1.mlp.gate_proj.weight' has shape [48, 32]",
        ),
        ({"num_key_value_heads": 4}, "checkpoint", "'model.layers.1.self_attn.k_proj.weight'"),
        ({"hidden_size": None}, "config.hidden_size", "missing"),
        ({"mlp_bias": True}, "config.mlp_bias", "not supported"),
    ],
)
def test_config_and_checkpoint_mismatches_name_the_key_or_tensor(tmp_path, change, field, says):
    path, _, _ = write_checkpoint(tmp_path, LLAMA)
    with pytest.raises(RequestError) as err:
        load("decoder_layer", path, _config(tmp_path, **change), 1, {"seq_len": 2})
    assert err.value.field == field and says in err.value.message, err.value


def test_a_missing_layer_names_its_tensor(tmp_path):
    path, config, _ = write_checkpoint(tmp_path, LLAMA)
    with pytest.raises(
        RequestError, match=r"'model\.layers\.3\.input_layernorm\.weight' is missing"
    ):
        load("decoder_stack", path, config, "1-3", {"seq_len": 2})


def test_truncated_and_malformed_files_are_refused(tmp_path):
    path, config, _ = write_checkpoint(tmp_path, LLAMA)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(RequestError, match="byte range"):
        load("decoder_layer", path, config, 0, {"seq_len": 2})
    path.write_bytes(b"\xff" * 16)
    with pytest.raises(RequestError, match="not a safetensors file"):
        open_checkpoint(path)


def test_transformers_5_and_qwen2_and_multimodal_configs():
    v5 = {
        "hidden_size": 8,
        "num_attention_heads": 2,
        "hidden_act": "gelu_pytorch_tanh",
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
    }
    assert params_from_config(v5) == {
        "hidden_size": 8,
        "num_attention_heads": 2,
        "hidden_act": "gelu_tanh",
        "rope_theta": 1e6,
    }
    llama3 = {**v5, "rope_parameters": {**LLAMA["rope_scaling"], "rope_theta": 5e5}}
    assert params_from_config(llama3)["rope_scaling"] == LLAMA["rope_scaling"]
    qwen2 = {
        "model_type": "qwen2",
        "hidden_size": 8,
        "num_attention_heads": 2,
        "sliding_window": 4096,
        "use_sliding_window": False,
    }
    assert params_from_config(qwen2)["o_proj_bias"] is False
    assert params_from_config({"text_config": v5, "vision_config": {}})["hidden_size"] == 8


def test_sliding_window_is_refused_only_when_it_matters(tmp_path):
    path, _, _ = write_checkpoint(tmp_path, LLAMA)
    config = _config(tmp_path, model_type="mistral", sliding_window=8, rope_scaling=None)
    load("decoder_layer", path, config, 0, {"seq_len": 8})
    with pytest.raises(RequestError) as err:
        load("decoder_layer", path, config, 0, {"seq_len": 1, "mode": "decode", "cache_len": 8})
    assert err.value.field == "config.sliding_window"


def test_layer_prefixes_are_found_from_the_names(tmp_path):
    tensors = random_tensors(LLAMA, prefix="model.language_model.")
    path, config, _ = write_checkpoint(tmp_path, LLAMA, tensors=tensors)
    assert len(load("attention", path, config, 2, {"seq_len": 2}).weights) == 5
    both = tensors | {f"vision.{k}": v for k, v in tensors.items()}
    path, config, _ = write_checkpoint(tmp_path / "two", LLAMA, tensors=both)
    with pytest.raises(RequestError, match="several prefixes"):
        load("attention", path, config, 2, {"seq_len": 2})


def test_layer_ranges():
    assert parse_layers("3") == range(3, 4) and parse_layers("0-15") == range(16)
    with pytest.raises(RequestError):
        parse_layers("5-2")


# -- the command line --------------------------------------------------------------------------


def test_cli_compiles_a_layer_and_a_stack_from_a_checkpoint(tmp_path, capsys):
    path, config, _ = write_checkpoint(tmp_path / "ck", LLAMA, dtype="bfloat16", shards=2)
    out = tmp_path / "layer2.zip"
    assert (
        main(
            [
                "compile",
                "decoder_layer",
                "--checkpoint",
                str(path),
                "--config",
                str(config),
                "--layer",
                "2",
                "--params",
                '{"seq_len": 8}',
                "--verify",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert validate(out).kind == "mlpackage"
    with zipfile.ZipFile(out) as zf:
        assert json.loads(zf.read("verification.json"))["passed"]
        described = json.loads(zf.read("kernel.json"))
    assert "self_attn.q_proj.weight" in described["weights"]
    stack = tmp_path / "stack.zip"
    assert (
        main(
            [
                "compile",
                "decoder_stack",
                "--checkpoint",
                str(path.parent),
                "--layers",
                "0-2",
                "--params",
                '{"seq_len": 1, "mode": "decode", "cache_len": 16}',
                "--format",
                "mil",
                "--verify",
                "-o",
                str(stack),
            ]
        )
        == 0
    )
    with zipfile.ZipFile(stack) as zf:
        report = json.loads(zf.read("verification.json"))
    assert report["passed"] and {"y", "k_0", "v_2"} <= set(report["outputs"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--layers", "3"], "'model.layers.3.input_layernorm.weight' is missing"),
        (
            ["--layers", "1", "--params", '{"seq_len": 2, "num_key_value_heads": 3}'],
            "params.num_key_value_heads",
        ),
        ([], "--checkpoint needs --layers"),
    ],
)
def test_cli_mismatches_exit_2_and_write_nothing(tmp_path, capsys, args, says):
    path, _, _ = write_checkpoint(tmp_path / "ck", LLAMA)
    out = tmp_path / "out.zip"
    argv = ["compile", "decoder_layer", "--checkpoint", str(path), "--params", '{"seq_len": 2}']
    assert main([*argv, *args, "-o", str(out)]) == 2
    assert says in capsys.readouterr().err and not out.exists()


def test_a_stack_from_a_checkpoint_verifies_as_one_program(tmp_path):
    path, config, _ = write_checkpoint(tmp_path, LLAMA, dtype="float16")
    loaded = load("decoder_stack", path, config, "0-2", {"seq_len": 6, "position_offset": 4})
    from app.catalog_build import build_kernel

    report = verify_build(build_kernel("decoder_stack", loaded.params, loaded.weights), seed=2)
    assert report["passed"] and len(report["outputs"]) == 7
