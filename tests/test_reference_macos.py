"""Core ML's own prediction against the numerical reference, for every catalog kernel. On a Mac:

    .venv/bin/pytest -m macos tests/test_reference_macos.py

Each kernel is packaged as an .mlpackage, loaded with coremltools (compute_units=CPU_AND_NE) and
run with `predict` on seeded random inputs; the reference executor runs the same package read
back from the zip. Both implement the same program with fp16 storage, so they must agree within
twice the op's verification tolerance (each is within one tolerance of the float64 definition);
data-movement kernels (gqa_expand, states) must agree bit for bit. Elsewhere these tests are
skipped with the reason.
"""

import sys
import zipfile

import numpy as np
import pytest
from kernel_cases import SMALL, VARIANTS

from app.catalog_build import build_kernel
from app.kernels import CATALOG
from app.packaging import write_kernel_zip
from app.reference import Executor
from app.reference.executor import random_inputs
from app.reference.load import open_artifact
from app.reference.verify import max_errors

pytestmark = [
    pytest.mark.macos,
    pytest.mark.skipif(
        sys.platform != "darwin", reason="Core ML prediction needs macOS (coremltools predict)"
    ),
]

CASES = [
    pytest.param(op, p, id=f"{op}-{i}") for i, (op, p) in enumerate([*SMALL.items(), *VARIANTS])
]


def package(tmp_path, op, params):
    build = build_kernel(op, params, random_seed=0)
    path = tmp_path / f"{op}.zip"
    with open(path, "wb") as f:
        write_kernel_zip(build, f, "mlpackage")
    zipfile.ZipFile(path).extractall(tmp_path / "pkg")
    return path, tmp_path / "pkg" / f"{build.name}.mlpackage"


@pytest.mark.parametrize(("op", "params"), CASES)
def test_core_ml_prediction_matches_the_reference(tmp_path, op, params):
    import coremltools as ct

    zip_path, mlpackage = package(tmp_path, op, params)
    program = open_artifact(zip_path).program  # the reference reads the artifact, not the build
    fn = program.main
    states = [v.name for v in fn.inputs if v.type != v.tensor]
    inputs = {k: v for k, v in random_inputs(fn, 7).items() if k not in states}

    model = ct.models.MLModel(str(mlpackage), compute_units=ct.ComputeUnit.CPU_AND_NE)
    # Core ML state buffers start zeroed (MLModel.makeState), as the reference's do
    state = {"state": model.make_state()} if states else {}
    got = model.predict(inputs, **state)
    want = Executor(program).run(inputs).outputs

    for name, expected in want.items():
        actual = np.asarray(got[name])
        assert actual.shape == expected.shape
        if CATALOG[op].tolerance == 0:
            np.testing.assert_array_equal(actual.astype(expected.dtype), expected)
        else:
            _, rel, _ = max_errors(actual, expected)
            assert rel <= 2 * CATALOG[op].tolerance, f"{name}: Core ML vs reference {rel:.3g}"
