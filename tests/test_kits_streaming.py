"""Kits at scale: the zip written program by program is the deterministic zip of its files, a
build that fails half-way leaves nothing behind, and the float64 reference holds one layer's
weights at a time. (bench/bench_kit_scale.py measures time and memory on a 1B-shaped model.)"""

from __future__ import annotations

import json
import weakref
import zipfile
from pathlib import Path

import numpy as np
import pytest
from checkpoint_support import write_safetensors
from kit_support import KIT_LLAMA, KIT_QWEN2, model_tensors, write_model

from app.errors import RequestError
from app.kits import KitOptions, build_kit, model_zip
from app.kits.build import write_kit
from app.kits.causal_lm import open_model
from app.kits.reference import WholeModel
from app.kits.runner import Kit, read_zip, reference_functions

CONTEXT, PREFILL = 16, 4


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("ckpt") / "llama", KIT_LLAMA, seed=0)


@pytest.mark.slow
def test_the_streamed_zip_is_the_deterministic_zip_of_its_files(llama, tmp_path):
    """Programs built in their paths' order (head_10 before head_2), each written as it is built,
    digests taken on the way out, kit.json after them and the files after it: the same bytes as
    all of the kit's files in memory through the one zip writer."""
    budget = 96_000  # 12 head pieces of some 1,500 rows: names of one and two digits
    options = KitOptions(
        format="mlmodelc",
        context=CONTEXT,
        prefill=PREFILL,
        verify=True,
        max_program_weight_bytes=budget,
    )
    lines: list[str] = []
    out = tmp_path / "llama.kit.zip"
    result = build_kit(llama, out, options, lines.append)
    files = read_zip(out)
    with zipfile.ZipFile(out) as zf:
        assert zf.namelist() == sorted(files)
    head = [p["name"] for p in result.meta["programs"] if p["role"] == "head"]
    assert len(head) > 10 and head[:3] == ["head_0", "head_1", "head_2"]  # run order in kit.json
    rebuilt = tmp_path / "rebuilt.zip"
    with open(rebuilt, "wb") as f:
        write_kit(files, f)
    assert rebuilt.read_bytes() == out.read_bytes()
    assert result.verification is not None and result.verification["passed"]
    assert (
        model_zip(
            llama,
            **{
                k: getattr(options, k)
                for k in ("format", "context", "prefill", "verify", "max_program_weight_bytes")
            },
        )
        == out.read_bytes()
    )
    # progress counts programs as they are built, one line each
    built = [line for line in lines if line.startswith("[")]
    assert [line.split("]")[0] for line in built] == [
        f"[{k}/{len(built)}" for k in range(1, len(built) + 1)
    ]


def test_a_build_failing_half_way_leaves_nothing(tmp_path):
    """The last layer holds a value beyond fp16: found when that layer is converted, after the
    first program was written into the zip; the zip's temp file goes, the target is untouched."""
    config = KIT_QWEN2 | {"num_hidden_layers": 3}
    tensors = model_tensors(config, seed=1)
    tensors["model.layers.2.mlp.down_proj.weight"][0, 0] = 1e6
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model.safetensors", tensors)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "model.kit.zip").write_bytes(b"an earlier kit")
    layer = open_model(folder).stack_params(0, 1, seq_len=1)
    from app.kernels.decoder_stack import layer_bytes

    options = KitOptions(
        context=CONTEXT, prefill=PREFILL, verify=True, max_program_weight_bytes=layer_bytes(layer)
    )  # one layer per program
    lines: list[str] = []
    with pytest.raises(RequestError, match="fp16 range"):
        build_kit(folder, out_dir / "model.kit.zip", options, lines.append)
    assert [line.split(" ")[1] for line in lines] == ["decoder_0:", "decoder_1:", "decoder_2:"]
    assert [p.name for p in out_dir.iterdir()] == ["model.kit.zip"]
    assert (out_dir / "model.kit.zip").read_bytes() == b"an earlier kit"


class _Layers:
    """A layer source that hands out fresh copies and watches them: when a layer is asked for,
    no array of the one before may still be alive."""

    def __init__(self, weights: dict[str, np.ndarray]):
        self.weights = weights
        self.asked: list[int] = []
        self.held: list[weakref.ref] = []

    def __call__(self, i: int) -> dict[str, np.ndarray]:
        alive = sum(ref() is not None for ref in self.held)
        assert alive == 0, f"layer {i} asked for while {alive} arrays of the last are alive"
        self.asked.append(i)
        prefix = f"layers.{i}."
        layer = {k: v.copy() for k, v in self.weights.items() if k.startswith(prefix)}
        self.held = [weakref.ref(v) for v in layer.values()]
        return layer


def test_the_reference_reads_one_layer_at_a_time_and_the_head_in_pieces(llama):
    model = open_model(llama)
    weights = model.layer_weights(0, model.num_layers)
    base = model.stack_params(0, 1, seq_len=1)
    embeddings = model.embeddings()
    whole = WholeModel(base, model.num_layers, weights, embeddings, model.final_norm(), embeddings)
    source = _Layers(weights)
    pieces = [embeddings[s : s + 5000] for s in range(0, len(embeddings), 5000)]
    lazy = WholeModel(base, model.num_layers, source, embeddings, model.final_norm(), pieces)
    ids = [5, 17, 3, 250, 9, 1]
    got = lazy.logits(ids)
    assert source.asked == list(range(model.num_layers))
    assert got.shape == (len(ids), model.vocab_size)
    np.testing.assert_allclose(got, whole.logits(ids), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("floor", [0, None])
def test_a_kit_being_written_holds_no_more_than_its_largest_program(
    llama, tmp_path, monkeypatch, floor
):
    """As verification runs it: programs read from the files when run, the least recently used
    let go while the weights held would pass the largest program's; a small kit (under
    HOLD_FLOOR_BYTES) is read once and held whole."""
    from app.kits import runner

    if floor is not None:
        monkeypatch.setattr(runner, "HOLD_FLOOR_BYTES", floor)
    out = tmp_path / "llama.kit.zip"
    build_kit(llama, out, KitOptions(context=CONTEXT, prefill=PREFILL))
    files = read_zip(out)
    whole, kit = Kit(files), Kit(files, being_written=True)
    assert len(whole.loaded) == len(whole.meta["programs"]) > 2 and kit.loaded == []
    sizes = {p["name"]: p["weight_bytes"] for p in kit.meta["programs"]}
    held: list[list[str]] = []
    make = reference_functions(kit)

    def functions(program: str, function: str | None, states: dict):
        run = make(program, function, states)

        def watched(inputs: dict):
            outputs = run(inputs)
            held.append(kit.loaded)
            return outputs

        return watched

    tokens, rows = kit.session(functions).generate([5, 17, 3, 250, 9, 1], max_new_tokens=3)
    if floor == 0:  # the budget is the largest program's weights: they are never passed
        assert max(sum(sizes[n] for n in names) for names in held) == max(sizes.values())
        assert min(len(names) for names in held) == 1  # the largest went alone
    else:  # a small kit: every program read once and kept
        assert len(held[-1]) == len(sizes)
    expected, expected_rows = whole.generate([5, 17, 3, 250, 9, 1], max_new_tokens=3)
    assert tokens == expected
    np.testing.assert_array_equal(np.stack(rows), np.stack(expected_rows))


@pytest.mark.slow
def test_an_opened_kit_is_mapped_checked_and_read_as_it_is_used(llama, tmp_path, monkeypatch):
    """Kit.open reads a kit zip the way a many-GB one must be read: its large files mapped from
    the zip (not copied into memory), every digest still checked, its programs loaded when run
    and held within the largest program's weights; the tokens are those of the whole kit."""
    from app.kits import runner
    from app.kits.runner import KitError

    out = tmp_path / "llama.kit.zip"
    build_kit(llama, out, KitOptions(context=CONTEXT, prefill=PREFILL))
    monkeypatch.setattr(runner, "HOLD_FLOOR_BYTES", 0)
    kit = Kit.open(out)
    owner = kit.embeddings
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert kit.loaded == [] and isinstance(owner, memoryview)  # mapped from the zip, not read
    tokens, rows = kit.generate([5, 17, 3, 250, 9, 1], max_new_tokens=3)
    sizes = {p["name"]: p["weight_bytes"] for p in kit.meta["programs"]}
    assert sum(sizes[n] for n in kit.loaded) <= max(sizes.values()) < sum(sizes.values())
    expected, expected_rows = Kit(read_zip(out)).generate([5, 17, 3, 250, 9, 1], max_new_tokens=3)
    assert tokens == expected
    np.testing.assert_array_equal(np.stack(rows), np.stack(expected_rows))
    tampered = tmp_path / "tampered.kit.zip"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(
                item,
                data[:-1] + bytes([data[-1] ^ 1]) if item.filename.endswith("rope.f16") else data,
            )
    with pytest.raises(KitError, match="sha256 differs"):
        Kit.open(tampered)
    (tmp_path / "not-a-zip.zip").write_bytes(b"nothing")
    with pytest.raises(KitError, match="cannot read the kit zip"):
        Kit.open(tmp_path / "not-a-zip.zip")
