"""resample as a Core AI program, run by Apple's CPU runtime (coreai-core, in a child process):
every sampling, padding and coordinate mode against the float64 meaning (the reference
executor), and ONNX's GridSample and RoiAlign, which lower onto it, against onnxruntime."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")

from onnx_support import Case
from test_onnx_ops_coverage import SPATIAL

from app.coreai import Call, aimodel_files, run_aimodel, translate, untranslatable
from app.language.targets import get_target
from app.mil import Builder, DType
from app.onnx.files import ModelFiles
from app.onnx.importer import import_onnx
from app.reference.apple import apple_report
from app.reference.executor import Executor
from app.reference.verify import max_errors
from app.request import OnnxParams

MODES = list(
    itertools.product(
        ("bilinear", "nearest"),
        ("constant", "border", "reflection", "symmetric"),
        ("unnormalized", "normalized_minus_one_to_one", "normalized_zero_to_one"),
        (False, True),
    )
)


def _program(coordinates: DType):
    """One resample per mode, all reading one image batch at one grid of points."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (2, 3, 5, 7))
    grid = b.input("grid", coordinates, (2, 4, 6, 2))
    outs = [
        b.op(
            "resample",
            f"y{i}",
            x=x,
            coordinates=grid,
            sampling_mode=sampling,
            padding_mode=padding,
            padding_value=np.array(0.5, np.float16),
            coordinates_mode=mode,
            align_corners=align,
        )
        for i, (sampling, padding, mode, align) in enumerate(MODES)
    ]
    return b.build(outs)


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [
        (DType.FP32, -2.5, 2.5),  # normalized: well beyond the image on every side
        (DType.FP32, -9.0, 15.0),  # pixels: several reflections deep
        (DType.FP16, -2.5, 2.5),
    ],
    ids=["fp32-normalized-range", "fp32-pixel-range", "fp16"],
)
def test_every_resample_mode_matches_the_reference_executor(dtype, low, high):
    program = _program(dtype)
    assert untranslatable(program) is None
    rng = np.random.default_rng(0)
    grid = rng.uniform(low, high, (2, 4, 6, 2))
    # unnormalized, a row of x halves on the image's middle row: nearest's ties, rounded to even
    grid[0, 0] = np.stack([np.arange(6) - 2.5, np.full(6, 2.0)], axis=-1)
    inputs = {
        "x": rng.standard_normal((2, 3, 5, 7)).astype(np.float16),
        "grid": grid.astype(dtype.numpy),
    }
    expected = Executor(program).run(inputs).outputs
    (got,) = run_aimodel(aimodel_files(translate(program)), [Call("main", inputs)]).results
    errors = {
        MODES[i]: max_errors(got.outputs[f"y{i}"], expected[f"y{i}"])[1] for i in range(len(MODES))
    }
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] < 5e-3, (worst, errors[worst])


def _one_resample(x_shape, grid, padding: str, value: float, coordinates: str, corners: bool):
    """A program of one bilinear resample of input x by input grid (`grid`: dtype, shape)."""
    b = Builder("ios18")
    y = b.op(
        "resample",
        "y",
        x=b.input("x", DType.FP16, x_shape),
        coordinates=b.input("grid", *grid),
        sampling_mode="bilinear",
        padding_mode=padding,
        padding_value=np.array(value, np.float16),
        coordinates_mode=coordinates,
        align_corners=corners,
    )
    return b.build([y])


def test_integer_coordinates_read_whole_pixels():
    program = _one_resample(
        (1, 2, 3, 4), (DType.INT32, (1, 5, 2, 2)), "constant", -1.0, "unnormalized", False
    )
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.standard_normal((1, 2, 3, 4)).astype(np.float16),
        "grid": rng.integers(-2, 6, (1, 5, 2, 2)).astype(np.int32),
    }
    expected = Executor(program).run(inputs).outputs["y"]
    (got,) = run_aimodel(aimodel_files(translate(program)), [Call("main", inputs)]).results
    np.testing.assert_array_equal(got.outputs["y"], expected.astype(np.float16))


def _onnx_cases() -> list[Case]:
    return [c for c in SPATIAL if c.name.startswith(("grid_sample", "roi_align"))]


@pytest.mark.parametrize("case", _onnx_cases(), ids=lambda c: c.name)
def test_grid_sample_and_roi_align_run_on_apples_runtime_as_onnxruntime_does(case, tmp_path):
    from onnx_support import save

    path = save(case, tmp_path)
    params = OnnxParams(model=path.name, shapes=case.shapes, io_dtype="fp16")
    build = import_onnx(params, ModelFiles.in_folder(path), target=get_target("ios18"), name="c")
    assert "resample" in {o.type for o in build.program.main.operations}
    report = apple_report(build)
    assert report["passed"], report["functions"]


def test_a_resample_is_one_interpolate_coordinates_and_no_gather():
    program = _one_resample(
        (1, 2, 4, 5),
        (DType.FP16, (1, 3, 6, 2)),
        "reflection",
        0.0,
        "normalized_minus_one_to_one",
        True,
    )
    text = str(translate(program))
    assert text.count("coreai.interpolate_coordinates") == 1
    assert "coreai.gather" not in text
