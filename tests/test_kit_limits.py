"""A model kit's own limits (app/kits/limits.py), derived from its checkpoint before any work:
the checkpoint's tensor bytes, the kit's predicted size (against the kit a build writes) and a
time limit that grows with the kit; over a cap, refused naming the setting."""

from __future__ import annotations

import pytest
from kit_support import KIT_LLAMA, KIT_QWEN3, model_tensors, write_model

from app.errors import ErrorKind, RequestError
from app.kits import model_zip
from app.kits.build import KitOptions
from app.kits.limits import GB, limits_of, longest_timeout_s
from app.kits.model import open_model
from app.settings import Settings

SETTINGS = Settings(kit_timeout_base_s=60, kit_timeout_s_per_gb=1e6)


def test_the_limits_follow_the_checkpoint(tmp_path):
    small = write_model(tmp_path / "small", KIT_QWEN3, seed=1)
    deeper = KIT_QWEN3 | {"num_hidden_layers": 6}
    big = write_model(tmp_path / "big", deeper, seed=1)
    options = KitOptions(format="mil", context=16, prefill=4)
    a = limits_of(open_model(small), options, SETTINGS)
    b = limits_of(open_model(big), options, SETTINGS)
    # the checkpoint's float32 tensors, byte for byte
    assert a.checkpoint_bytes == sum(t.nbytes for t in model_tensors(KIT_QWEN3, 1).values())
    assert b.checkpoint_bytes == sum(t.nbytes for t in model_tensors(deeper, 1).values())
    assert b.kit_bytes_estimate > a.kit_bytes_estimate
    assert b.timeout_s > a.timeout_s
    assert a.timeout_s == pytest.approx(60 + 1e6 * a.kit_bytes_estimate / GB)
    verified = limits_of(open_model(small), KitOptions(format="mil", verify=True), SETTINGS)
    assert verified.timeout_s == pytest.approx(60 + 2e6 * a.kit_bytes_estimate / GB)
    four_bit = {"layers": {"mode": "palettize", "nbits": 4}}
    quantized = limits_of(open_model(big), KitOptions(quantize=four_bit), SETTINGS)
    assert quantized.kit_bytes_estimate < b.kit_bytes_estimate


def test_the_estimate_is_the_size_of_the_kit_built(tmp_path):
    """Llama's weights dominate its kit (tied head, 16,500 rows): the estimate is within 2%."""
    folder = write_model(tmp_path / "llama", KIT_LLAMA, seed=3)
    for kit_format in ("mil", "mlpackage"):
        options = {"format": kit_format, "context": 16, "prefill": 4}
        estimate = limits_of(open_model(folder), KitOptions(**options), SETTINGS)
        built = len(model_zip(folder, **options))
        assert abs(built - estimate.kit_bytes_estimate) < 0.02 * built, kit_format


def test_over_a_cap_the_kit_is_refused_naming_the_setting(tmp_path):
    model = open_model(write_model(tmp_path / "qwen3", KIT_QWEN3, seed=1))
    limits = limits_of(model, KitOptions(), SETTINGS)
    with pytest.raises(RequestError) as checkpoint:
        limits_of(model, KitOptions(), Settings(max_checkpoint_bytes=limits.checkpoint_bytes - 1))
    assert checkpoint.value.field == "files" and checkpoint.value.kind == ErrorKind.TOO_LARGE
    assert f"ANE_MAX_CHECKPOINT_BYTES={limits.checkpoint_bytes - 1}" in checkpoint.value.message
    assert str(limits.checkpoint_bytes) in checkpoint.value.message
    tight = Settings(kit_cache_max_bytes=limits.kit_bytes_estimate - 1)
    with pytest.raises(RequestError) as cache:
        limits_of(model, KitOptions(), tight)
    assert cache.value.field == "files" and cache.value.kind == ErrorKind.TOO_LARGE
    assert "ANE_KIT_CACHE_MAX_BYTES" in cache.value.message
    assert str(limits.kit_bytes_estimate) in cache.value.message


def test_a_farm_workers_backstop_is_past_every_limit_its_settings_give():
    settings = Settings()
    # a kit is at most twice its checkpoint's bytes; verified, its per-GB share doubles
    largest = settings.kit_timeout_base_s + 4 * settings.kit_timeout_s_per_gb * (
        settings.max_checkpoint_bytes / GB
    )
    assert longest_timeout_s(settings) == pytest.approx(largest)
    assert longest_timeout_s(settings) > settings.job_timeout_s
