"""The primitives the graph passes and the ONNX importer need, one small graph per use
(tests/primitive_cases.py): each built, verified against its float64 meaning within its error
bound, written to model.mil and parsed back identical; each meaning compared with coremltools'
own (its op definitions' value inference, in float32); and all of them, in one program, run by
Apple's Core AI runtime against the same meanings. Forms without a Core AI translation are
refused naming the node."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from primitive_cases import CASES, Case

from app.artifacts import prepare, zip_bytes
from app.graphs.build import build_graph
from app.graphs.spec import GraphParams
from app.mil import Var, emit_text, ops, parse_text
from app.mil.args import Args
from app.reference import Executor
from app.reference.executor import random_inputs
from app.reference.verify import max_errors
from app.request import KernelRequest


def _request(case: Case, **options) -> KernelRequest:
    """The case as written: graph passes "none" (tests/test_passes_pipeline.py builds every case
    under the default pipeline too)."""
    return KernelRequest.create(
        graph=case.graph, weights=case.weights or None, name=case.id, passes="none", **options
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_primitive_builds_verifies_and_round_trips(case):
    prepared = prepare(_request(case, format="mil", verify=True))
    report = prepared.verification
    assert report is not None and report["passed"], report
    program = prepared.build.program
    assert case.op in {op.type for op in program.main.operations}
    with zipfile.ZipFile(io.BytesIO(zip_bytes(prepared))) as zf:
        text = zf.read("model.mil").decode()
        names = zf.namelist()
        blob = zf.read("weights/weight.bin") if "weights/weight.bin" in names else None
    parsed = parse_text(text, blob)
    assert emit_text(parsed.program, parsed.offsets, parsed.build_info) == text
    inputs = random_inputs(program.main, 5)
    ours = Executor.from_written_weights(program).run(inputs).outputs
    theirs = Executor(parsed.program, weights=blob, offsets=parsed.offsets).run(inputs).outputs
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs[name], value)


# -- each meaning against coremltools' own ----------------------------------------------------
def _coremltools_value(op, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The op applied by coremltools' builder to constant arguments (its value inference),
    floats in float32."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function

    def given(var) -> object:
        fixed = var.op is not None and var.op.type == "const"
        value = var.op.value.stored() if fixed else values[var.name]
        if isinstance(value, str):
            return value
        array = np.asarray(value)
        array = array.astype(np.float32) if array.dtype.kind == "f" else array
        return array[()] if array.ndim == 0 else array  # scalars as NumPy scalars

    kwargs = {
        arg: tuple(given(v) for v in value) if isinstance(value, tuple) else given(value)
        for arg, value in op.inputs.items()
    }
    with Function({}, opset_version=ct.target.iOS18):
        result = getattr(mb, op.type)(**kwargs)
    return [v.val for v in (result if isinstance(result, list | tuple) else [result])]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.coremltools], ids=[c.id for c in CASES if c.coremltools]
)
def test_each_meaning_agrees_with_coremltools_value_inference(case):
    build = build_graph(GraphParams.model_validate(case.graph), case.weights)
    values = Executor(build.program).run(random_inputs(build.program.main, 1), keep=True).values
    assert values is not None
    (op,) = [op for op in build.program.main.operations if op.name == case.id]
    wide = {
        k: np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else v
        for k, v in values.items()
    }
    for var in op.inputs.values():
        for v in var if isinstance(var, tuple) else (var,):
            if v.op is not None and v.op.type == "const":
                wide[v.name] = v.op.value.stored()
    exact = ops.meaning(op.type)(Args(op, wide, {}, exact=True))
    exact = exact if len(op.outputs) > 1 else [exact]
    for mine, theirs, out in zip(exact, _coremltools_value(op, values), op.outputs, strict=True):
        theirs = np.asarray(theirs)
        assert theirs.shape == out.tensor.shape, (out.name, theirs.shape)
        if out.tensor.dtype.is_float:
            assert max_errors(theirs, mine)[1] < 1e-5, out.name
        else:
            np.testing.assert_array_equal(np.asarray(mine).astype(theirs.dtype), theirs)


# -- Apple's Core AI runtime -----------------------------------------------------------------
def _merged(cases: list[Case]) -> tuple[dict, dict[str, np.ndarray]]:
    """The cases' graphs side by side in one graph, every name prefixed by the case's index."""
    graph: dict = {"inputs": {}, "nodes": [], "outputs": {}}
    weights: dict[str, np.ndarray] = {}
    for n, case in enumerate(cases):

        def named(ref: str, n: int = n) -> str:
            return f"c{n}_{ref}"

        graph["inputs"].update({named(k): v for k, v in case.graph["inputs"].items()})
        for node in case.graph["nodes"]:
            inputs = {
                arg: [named(r) for r in ref] if isinstance(ref, list) else named(ref)
                for arg, ref in node["inputs"].items()
            }
            graph["nodes"].append({**node, "id": named(node["id"]), "inputs": inputs})
        graph["outputs"].update({named(k): named(v) for k, v in case.graph["outputs"].items()})
        weights.update({named(k): v for k, v in case.weights.items()})
    return graph, weights


def test_the_primitives_run_on_apples_core_ai_runtime_within_their_bounds():
    pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")
    from app.reference.apple import apple_report

    graph, weights = _merged([c for c in CASES if c.coreai])
    build = KernelRequest.create(graph=graph, weights=weights).build(random_seed=0)
    report = apple_report(build)
    failed = {
        name: check
        for fn in report["functions"].values()
        for name, check in fn["outputs"].items()
        if not check["passed"]
    }
    assert not failed and report["passed"], failed


@pytest.mark.parametrize("case", [c for c in CASES if not c.coreai], ids=lambda c: c.id)
def test_forms_without_a_core_ai_translation_are_refused_naming_the_node(case):
    pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")
    from app.coreai.translate import RULES, TranslationError, translate, untranslatable

    build = _request(case).build(random_seed=0)
    if case.op not in RULES:  # an op with no rule at all: found before anything is written
        found = untranslatable(build.program)
        assert found is not None and found.op.name == case.id
        assert f"op {case.op!r} has no Core AI translation" in found.reason
        return
    with pytest.raises(TranslationError) as raised:  # a form of a translated op
        translate(build.program)
    assert raised.value.found.op.name == case.id
    # a gather's batch_dims, or a scatter_nd that combines rather than writes
    assert "batch_dims" in str(raised.value) or "scatter_nd mode 'add'" in str(raised.value)


# -- the docs' table -------------------------------------------------------------------------
def _bound(error_bound: float) -> str:
    units = error_bound / 2.0**-11
    return "0" if not error_bound else f"{units:g}u"


def test_the_graphs_doc_lists_every_primitive_with_its_facts():
    from conftest import REPO

    from app.coreai.coverage import coverage
    from app.graphs.primitives import PREFIX, primitives
    from app.kernels import CATALOG

    translates = {c.op: c.translates for c in coverage()}
    text = (REPO / "docs" / "graphs.md").read_text()
    section = text[text.index("## Primitives") : text.index("## Verification")]
    documented = [line for line in section.splitlines() if line.startswith("| `")]
    expected = []
    for p in primitives():
        record = p.record
        name = f"{PREFIX}{p.name}" if p.name in CATALOG else p.name
        cells = [
            f"`{name}`",
            record.family.value,
            p.summary.replace("|", "\\|"),
            _bound(p.tolerance),
            record.ane.reported,
            "yes" if translates[p.name] else "no",
        ]
        expected.append("| " + " | ".join(cells) + " |")
    assert documented == expected


# -- graph hooks and bad input ---------------------------------------------------------------
def _one_node(op: str, params: dict, shape=(2, 3, 4, 6), **inputs) -> dict:
    """One node reading `a` [2, 3, 4, 6] (fp16) and, when it names it, `i` [1, 2] (int32)."""
    graph_inputs = {"a": {"shape": list(shape)}}
    if "i" in inputs.values():
        graph_inputs["i"] = {"shape": [1, 2], "dtype": "int32"}
    return {
        "inputs": graph_inputs,
        "nodes": [{"id": "n", "op": op, "params": params, "inputs": inputs or {"x": "a"}}],
        "outputs": {"y": "n"},
    }


X = {"x": "a"}
REFUSED = [
    ("clip", {"alpha": 1.0, "beta": 0.5}, X, "alpha", "smaller than beta"),
    ("prelu", {"alpha": [0.1, 0.2]}, X, "alpha", "one value per channel"),
    ("einsum", {"equation": "nchw,nhwu->nchu"}, {"values": ["a", "a"]}, "equation", "two forms"),
    ("pad", {"pad": [0, 6], "mode": "reflect"}, X, "pad", "reflect pads at most 5"),
    ("gather", {"batch_dims": 1}, {"x": "a", "indices": "i"}, "batch_dims", "not shared"),
    ("topk", {"k": 7}, X, "k", "is not in [1, 6]"),
    ("upsample_bilinear", {"half_pixel_centers": True}, X, "half_pixel_centers", "align"),
    ("depth_to_space", {"block_size": 2}, X, "block_size", "divides 3"),
    ("layer_norm", {"axes": [-1], "gamma": [1.0, 2.0]}, X, "gamma", "normalized shape [6]"),
    ("quantize", {"output_dtype": "int16", "scale": 0.1}, {"input": "a"}, "output_dtype", "int8"),
]


@pytest.mark.parametrize(
    ("op", "params", "inputs", "arg", "message"), REFUSED, ids=[r[0] for r in REFUSED]
)
def test_a_bad_application_is_refused_naming_the_node_and_argument(
    op, params, inputs, arg, message
):
    from app.errors import RequestError

    with pytest.raises(RequestError) as raised:
        build_graph(GraphParams.model_validate(_one_node(op, params, **inputs)))
    assert raised.value.field == "nodes[0]"
    assert f"argument {arg!r}" in raised.value.message and message in raised.value.message


def test_integer_weights_are_int32_and_refused_beyond_its_range():
    from app.errors import RequestError

    body = _one_node("gather", {"axis": 3})
    indices = np.array([5, 0, 2], np.int64)  # what NumPy makes of Python ints
    build = build_graph(GraphParams.model_validate(body), {"n.indices": indices})
    (gather,) = [op for op in build.program.main.operations if op.type == "gather"]
    indices_const = gather.inputs["indices"]
    assert isinstance(indices_const, Var) and indices_const.tensor.dtype.value == "int32"
    with pytest.raises(RequestError) as raised:
        build_graph(GraphParams.model_validate(body), {"n.indices": indices + 2**40})
    assert raised.value.field == "nodes[0].weights.indices" and "int32" in raised.value.message


def test_the_ops_listing_names_every_primitive_and_which_constants_take_weights():
    from app.catalog_info import primitive_catalog

    listed = {p["name"]: p for p in primitive_catalog()}
    assert {c.op for c in CASES} <= {name.removeprefix("mil.") for name in listed}
    gamma = listed["layer_norm"]["arguments"]["gamma"]
    assert gamma["in"] == "params" and gamma["weights"] is True
    assert "weights" not in listed["pad"]["arguments"]["mode"]


COSTS = {  # multiply-adds twice for the products; per output element and window for the rest
    "lin": 2 * (2 * 4 * 5) * 6,  # x [2, 4, 6] · weight [5, 6]ᵀ
    "ctc": 2 * (2 * 3 * 4 * 6) * (2 * 3 * 3),  # each input element into C_out/groups · K taps
    "es3": 2 * (3 * 4 * 2) * 5,  # [3, 4, 5] by [5, 1, 2] -> [3, 4, 2]
    "mxp": (2 * 3 * 2 * 3) * 4,  # a 2×2 window per output
    "lnm": 5 * (2 * 3 * 4 * 6),  # mean, centre, square, mean, scale
    "bnm": 2 * (2 * 3 * 4 * 6),  # one scale, one shift (the constants folded)
}


@pytest.mark.parametrize("case", [c for c in CASES if c.id in COSTS], ids=lambda c: c.id)
def test_the_estimate_counts_each_primitive_s_work(case):
    from app.estimates.work import op_flops

    build = build_graph(GraphParams.model_validate(case.graph), case.weights)
    (op,) = [op for op in build.program.main.operations if op.name == case.id]
    assert op_flops(op) == COSTS[case.id]


def test_a_graph_of_new_primitives_over_http(client):
    """The service as users call it: gamma and beta inline (JSON lists), topk's two outputs
    named by the graph, a bool-valued comparison feeding select; verified."""
    body = {
        "inputs": {"x": {"shape": [1, 4, 8]}},
        "nodes": [
            {
                "id": "norm",
                "op": "layer_norm",
                "params": {"axes": [-1]},
                "inputs": {"x": "x"},
                "weights": {"gamma": [1.5] * 8, "beta": [0.25] * 8},
            },
            {"id": "act", "op": "gelu", "inputs": {"x": "norm"}},
            {"id": "top", "op": "topk", "params": {"k": 3}, "inputs": {"x": "act"}},
            {"id": "pos", "op": "greater", "inputs": {"x": "norm", "y": "act"}},
            {"id": "pick", "op": "select", "inputs": {"cond": "pos", "a": "norm", "b": "act"}},
        ],
        "outputs": {"values": "top.0", "indices": "top.1", "picked": "pick"},
        "format": "mil",
        "verify": True,
    }
    answer = client.post("/v1/graphs", json=body)
    assert answer.status_code == 200, answer.text
    with zipfile.ZipFile(io.BytesIO(answer.content)) as zf:
        report = json.loads(zf.read("verification.json"))
        text = zf.read("model.mil").decode()
    assert report["passed"] and set(report["outputs"]) == {"values", "indices", "picked"}
    assert " = layer_norm(" in text and " = topk(" in text and " = select(" in text
