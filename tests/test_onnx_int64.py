"""int64 inputs (an ONNX model's ids and masks) become the program's int32 inputs: an id beyond
int32 is refused naming the input, never wrapped, by `ane-kernels run` (the reference executor)
and by the client's `program_inputs`, which also maps the model's input names to the program's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx_support import Case, op, rng_array, save

from app.cli import main
from app.client import InputError, program_inputs

BEYOND = 2**31


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("int64")
    case = Case(
        "lookup",
        [op("Gather", ["table", "input.ids"], ["e"]), op("Mul", ["e", "scale"])],
        {"input.ids": [1, 6], "scale": [1, 6, 4]},
        consts={"table": rng_array([10, 4])},
        input_types={"input.ids": TensorProto.INT64},
    )
    out = folder / "lookup.zip"
    assert main(["onnx", str(save(case, folder)), "-o", str(out), "--format", "mil"]) == 0
    return folder, out


def test_run_refuses_an_id_beyond_int32_naming_the_input(built, capsys):
    folder, zipped = built
    scale = folder / "scale.npy"
    np.save(scale, np.ones((1, 6, 4), np.float32))
    for ids, expected in ((np.arange(6, dtype=np.int64).reshape(1, 6), 0), (None, 2)):
        path = folder / "ids.npy"
        np.save(path, ids if ids is not None else np.full((1, 6), BEYOND, np.int64))
        argv = ["run", str(zipped), "--input", f"input_ids={path}", "--input", f"scale={scale}"]
        assert main([*argv, "--output-dir", str(folder / "out")]) == expected
    err = capsys.readouterr().err
    assert "inputs.input_ids" in err and str(BEYOND) in err and "int32" in err


def test_the_client_maps_names_and_holds_ids_to_int32(built):
    _, zipped = built
    ids = np.array([[0, 1, 2, 9, 3, 4]], np.int64)
    scale = np.ones((1, 6, 4), np.float32)
    feeds = program_inputs(zipped, {"input.ids": ids, "scale": scale})
    assert feeds["input_ids"].dtype == np.int32 and feeds["scale"].dtype == np.float16
    assert np.array_equal(feeds["input_ids"], ids)
    assert program_inputs(zipped.read_bytes(), {"input_ids": ids, "scale": scale}).keys() == {
        "input_ids",
        "scale",
    }
    for bad, message in (
        ({"input.ids": ids - BEYOND - 1, "scale": scale}, "beyond int32's range"),
        ({"input.ids": ids.astype(np.float32), "scale": scale}, "float32 values"),
        ({"input.ids": ids}, "missing"),
        ({"input.ids": ids, "scale": scale[..., :2]}, r"shape \[1, 6, 2\]"),
        ({"input.ids": ids, "scale": scale * 1e6}, "beyond ±65504"),
        ({"ids": ids, "scale": scale}, "unknown"),
    ):
        with pytest.raises(InputError, match=message):
            program_inputs(zipped, bad)
