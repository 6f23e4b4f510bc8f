"""This project's own kernels through the `.mlmodelc` writer: every catalog op, both targets.

The package comes from the project's writer (`write_kernel_zip(build, f, "mlpackage")`); the
bundle's model.mil must parse back to the package's program, its weight.bin must be the
package's, and `decompile` must give a package the project's validator (coremltools' loader plus
the description checks) accepts.
"""

from __future__ import annotations

import io

import pytest
from kernel_cases import SMALL, VARIANTS
from mlmodelc_support import extract_kernel_package, files_of, read_model

from app.catalog_build import build_kernel
from app.errors import RequestError
from app.language.parser import parse_program
from app.mlmodelc import compile_package, decompile
from app.packaging import write_kernel_zip
from app.reference.validation import validate

CASES = [
    (op, params, target)
    for op, params in [*SMALL.items(), *VARIANTS]
    for target in ("ios18", "ios17")
]


@pytest.mark.parametrize(
    ("op", "params", "target"), CASES, ids=[f"{c[0]}-{i}-{c[2]}" for i, c in enumerate(CASES)]
)
def test_catalog_kernel_compiles_and_reads_back(op, params, target, tmp_path):
    try:
        build = build_kernel(op, params, None, target=target, random_seed=0)
    except RequestError as exc:
        assert target == "ios17" and "ios18" in str(exc)  # sdpa and state kernels are ios18-only
        pytest.skip(f"{op} is ios18-only")
    buffer = io.BytesIO()
    write_kernel_zip(build, buffer, "mlpackage")
    package = extract_kernel_package(buffer.getvalue(), tmp_path / "zip")
    bundle = compile_package(package, tmp_path / f"{op}.mlmodelc").path

    parsed = parse_program((bundle / "model.mil").read_text("utf-8"))
    assert parsed.dialect.version == ("1.3" if target == "ios18" else "1.0")
    source = read_model(package / "Data/com.apple.CoreML/model.mlmodel").mlProgram
    fn = source.functions["main"]
    mine = parsed.program.functions["main"]
    assert mine.block_specializations[fn.opset] == fn.block_specializations[fn.opset]
    assert sorted(v.name for v in mine.inputs) == sorted(v.name for v in fn.inputs)

    source_weights = package / "Data/com.apple.CoreML/weights/weight.bin"
    if source_weights.exists():
        assert (bundle / "weights/weight.bin").read_bytes() == source_weights.read_bytes()
    else:
        assert "weights/weight.bin" not in files_of(bundle)

    rebuilt = decompile(bundle, tmp_path / "rebuilt.mlpackage")
    assert validate(rebuilt.path).ops == validate(package).ops
