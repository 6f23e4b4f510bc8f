"""Every catalog op, over its sample space (`param_space`), gives packages coremltools' own
loader accepts.

`app.reference.validation.validate` runs coremltools' milproto loader (which re-infers every op's type and
reads every blob), `_check_early_error_out_for_invalid_program`, and checks the model description
against the program and each const's type against its value.
"""

import io
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from kernel_cases import SMALL, VARIANTS, param_strategy

from app.artifacts import kernel_zip
from app.kernels import CATALOG
from app.reference.validation import validate


def _check(tmp_path, op, params, fmt="mlpackage", target="ios18"):
    data = kernel_zip(op, params, random_seed=7, format=fmt, target=target)
    path = tmp_path / f"{op}.zip"
    path.write_bytes(data)
    return validate(path)


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(CATALOG))
def test_each_op_over_its_sample_space(op, tmp_path_factory):
    """Each op's `param_space`, small axes (tests/kernel_cases.py)."""

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(param_strategy(op))
    def run(params):
        report = _check(tmp_path_factory.mktemp(op), op, params)
        assert report.kind == "mlpackage" and report.ops >= 1

    run()


@pytest.mark.parametrize(
    ("op", "params"), VARIANTS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(VARIANTS)]
)
@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_variants_validate(op, params, fmt, tmp_path):
    assert _check(tmp_path, op, params, fmt).kind == fmt


@pytest.mark.parametrize("op", ["conv", "matmul", "identity", "scale", "rmsnorm", "gqa_expand"])
def test_ios17_packages_validate(op, tmp_path):
    report = _check(tmp_path, op, SMALL[op], target="ios17")
    assert report.kind == "mlpackage"
    data = kernel_zip(op, SMALL[op], random_seed=7, target="ios17")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        model = zf.read(f"{op}.mlpackage/Data/com.apple.CoreML/model.mlmodel")
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model.FromString(model)
    assert spec.specificationVersion == 8 and spec.mlProgram.functions["main"].opset == "CoreML7"


def test_causal_sdpa_also_builds_for_ios17(tmp_path):
    params = {"n_heads": 2, "head_dim": 4, "seq_len": 3, "causal": True}
    assert _check(tmp_path, "sdpa", params, target="ios17").ops > 3
