"""One `model.mil` spelling: the raw `mil` bundle holds the text the `.mlmodelc` writer prints for
the same program (Apple's compiler's spelling under the default toolchain profile), line for line
but the buildInfo line, to which the compiler adds its own entries. Every catalog example, both
targets, and the graph examples."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from kernel_cases import SMALL, VARIANTS
from mlmodelc_support import extract_kernel_package

from app.catalog_build import build_kernel
from app.errors import RequestError
from app.graphs.build import build_graph
from app.graphs.examples import swiglu_ffn
from app.graphs.spec import GraphParams
from app.kernels import ProgramBuild
from app.language.parser import parse_program
from app.language.profiles import DEFAULT_PROFILE
from app.mlmodelc import compile_package
from app.packaging import layout, write_kernel_zip

CASES = [
    (op, params, target)
    for op, params in [*SMALL.items(), *VARIANTS]
    for target in ("ios18", "ios17")
]
RNG = np.random.default_rng(0)
D, H, S = 16, 24, 8
FFN_WEIGHTS = {
    "gate.weight": RNG.standard_normal((H, D)).astype(np.float32),
    "up.weight": RNG.standard_normal((H, D)).astype(np.float32),
    "down.weight": RNG.standard_normal((D, H)).astype(np.float32),
}


def _texts(build: ProgramBuild, tmp_path) -> tuple[str, str]:
    raw, package = io.BytesIO(), io.BytesIO()
    write_kernel_zip(build, raw, "mil")
    write_kernel_zip(build, package, "mlpackage")
    raw_text = zipfile.ZipFile(raw).read(layout.MIL_TEXT).decode()
    source = extract_kernel_package(package.getvalue(), tmp_path / "zip")
    bundle = compile_package(source, tmp_path / "k.mlmodelc", DEFAULT_PROFILE).path
    return raw_text, (bundle / "model.mil").read_text("utf-8")


def _assert_same_but_build_info(raw: str, compiled: str) -> None:
    raw_lines, compiled_lines = raw.split("\n"), compiled.split("\n")
    assert raw_lines[1].startswith("[buildInfo = ") and compiled_lines[1].startswith("[buildInfo")
    assert raw_lines[:1] + raw_lines[2:] == compiled_lines[:1] + compiled_lines[2:]
    # the compiler adds its entries to the program's own: every raw entry is still there
    raw_info = parse_program(raw).program.attributes["buildInfo"].immediateValue.dictionary
    compiled_info = parse_program(compiled).program.attributes["buildInfo"]
    assert all(pair in compiled_info.immediateValue.dictionary.values for pair in raw_info.values)


@pytest.mark.parametrize(
    ("op", "params", "target"), CASES, ids=[f"{c[0]}-{i}-{c[2]}" for i, c in enumerate(CASES)]
)
def test_raw_bundle_text_is_the_compiled_text(op, params, target, tmp_path):
    try:
        build = build_kernel(op, params, None, target=target, random_seed=0)
    except RequestError:
        pytest.skip(f"{op} is ios18-only")
    _assert_same_but_build_info(*_texts(build, tmp_path))


@pytest.mark.parametrize("target", ["ios18", "ios17"])
def test_graph_example_text_is_the_compiled_text(target, tmp_path):
    graph = GraphParams.model_validate(swiglu_ffn(D, H, S))
    build = build_graph(graph, FFN_WEIGHTS, target=target)
    _assert_same_but_build_info(*_texts(build, tmp_path))
