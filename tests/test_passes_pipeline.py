"""The pass pipeline as a request chooses it: "none" gives a graph's bytes and key as they were
before passes existed, the default is in the key with its version, the raw mil bundle keeps the
ops ANE-direct runtimes report failing spelled out (fuse-all fuses them), kernel.json and the
CLI summary say what each pass did, every edge takes `passes` (HTTP, compile-graph, the client,
job records), bad choices are 4xx naming the field, and a pass that breaks a program's
interface is caught."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import subprocess
import sys
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from app import artifacts
from app.errors import RequestError
from app.mil import Builder, DType, ops
from app.mil.ops import AneFacts, AneStatus
from app.passes import (
    AUTHORS_CHOICES,
    DEFAULT,
    PASSES,
    PassError,
    facts,
    hand_written,
    parse_passes,
    resolve,
    run_pipeline,
)
from app.passes import pipelines as pipelines_module
from app.passes.graph_pass import GraphPass
from app.passes.pipelines import VERSION, Pipeline, Step
from app.reference.verify import verify_build
from app.request import KernelRequest
from tests.graph_passes import assert_agrees, build, changed_by, graph, kinds, node, values
from tests.http_support import assert_problem
from tests.test_passes_onnx import LEFT_OUT_FOR_MIL
from tests.test_passes_seed import _gelu_tanh

# A graph built on main at 6170062, before passes existed: its key and its zip's sha256 then.
# "none" must give exactly these (both hold the generator's and coremltools' versions: a bump of
# either changes them, and these with it).
GOLDEN_BODY = {
    "inputs": {"x": {"shape": [1, 4, 1, 3], "dtype": "fp16"}},
    "nodes": [
        {"id": "c", "op": "conv", "params": {"out_channels": 4}, "inputs": {"x": "x"}},
        {"id": "b", "op": "add", "inputs": {"x": "c"}},
        {"id": "d", "op": "real_div", "inputs": {"x": "b"}},
        {"id": "r", "op": "relu", "inputs": {"x": "d"}},
    ],
    "outputs": {"y": "r"},
}
GOLDEN_WEIGHTS = {
    "c.weight": np.arange(16, dtype=np.float32).reshape(4, 4) / 16,
    "b.y": np.array([0.5, -0.25, 0.125, 1.0], np.float32).reshape(1, 4, 1, 1),
    "d.y": np.array([2.0], np.float32),
}
BEFORE_PASSES = {
    "mil": (
        "48010fc46d77157d15644362ff063841e9a3441d1c8e95d1a97ee887261d3c33",
        "318d0b737f26bad740bdf1eec0c75aa4805d7ce847a039e2e10a4f2e1da9bdac",
    ),
    "mlpackage": (
        "acf7367152a438e40edb3796db7c9e8d889b2f694b6d12c1572e9882011af9e4",
        "494ecaf5dcdf690b84106f01eb06f058398fa676c8172c34bf25be85b3521831",
    ),
}


def _golden(fmt: str, **kw) -> KernelRequest:
    return KernelRequest.create(
        graph=GOLDEN_BODY, weights=GOLDEN_WEIGHTS, format=fmt, name="golden", **kw
    )


def _zip(request: KernelRequest) -> bytes:
    return artifacts.zip_bytes(artifacts.prepare(request))


@pytest.mark.parametrize("fmt", ["mil", "mlpackage"])
def test_none_gives_the_key_and_bytes_a_graph_had_before_passes(fmt):
    request = _golden(fmt, passes="none")
    key, digest = BEFORE_PASSES[fmt]
    assert request.key == key
    assert hashlib.sha256(_zip(request)).hexdigest() == digest


def test_a_graph_without_passes_runs_the_default_whose_name_and_version_are_in_the_key(
    monkeypatch,
):
    default = _golden("mil")
    assert default.passes == parse_passes("default") == _golden("mil", passes="default").passes
    assert default.key != BEFORE_PASSES["mil"][0]
    left_out = list(LEFT_OUT_FOR_MIL)  # mil: see below
    assert default._key_doc["passes"] == {
        "pipeline": "default",
        "version": VERSION,
        "left_out": left_out,
    }
    assert _golden("mlpackage")._key_doc["passes"] == {"pipeline": "default", "version": VERSION}
    monkeypatch.setattr(pipelines_module, "VERSION", VERSION + 1)
    assert _golden("mil").key != default.key
    monkeypatch.undo()
    listed = _golden("mil", passes=["const_elimination", "dead_code_elimination"])
    assert listed.key not in (default.key, BEFORE_PASSES["mil"][0])


def test_kernel_json_says_what_each_pass_changed():
    with zipfile.ZipFile(io.BytesIO(_zip(_golden("mil")))) as zf:
        kernel = json.loads(zf.read("kernel.json"))
        text = zf.read("model.mil").decode()
    report = kernel["passes"]
    assert report["pipeline"] == "default" and report["version"] == VERSION
    # the catalog conv's weight and five argument consts; after: its arguments, the folded
    # weight and bias, the conv and the relu
    assert report["ops_before"] == 12 and report["ops_after"] == 9
    done = {c["pass"]: c for c in report["changes"]}
    assert done["divide_to_multiply"]["removed"]["real_div"] == ["d"]
    assert done["fuse_conv_bias"]["removed"]["add"] == ["b"]
    assert done["fuse_conv_scale"]["added"]["conv"] == ["d"]
    assert "real_div" not in text and " add(" not in text
    # the weights as the request gave them, each with the dtype its const is stored in
    assert set(kernel["weights"]) == set(GOLDEN_WEIGHTS)
    assert kernel["weights"]["c.weight"]["stored_dtype"] == "fp16"


def _tanh_gelu(fmt: str, passes="default"):
    body, weights = _gelu_tanh(1)
    return build(body, weights, passes, fmt)


def test_mil_keeps_ops_ane_direct_runtimes_report_failing_spelled_out_and_fuse_all_fuses():
    """gelu's record reports it failing on the ANE (the preflight warns of it): the default for
    the mil bundle ANE-direct runtimes load leaves the tanh GELU spelt out; Core ML's formats
    fuse it, and fuse-all fuses it for mil too."""
    assert ops.get("gelu").ane.status is AneStatus.REPORTED_FAILING
    assert "gelu" in kinds(_tanh_gelu("mlpackage").program)
    assert "gelu" in kinds(_tanh_gelu("aimodel").program)
    spelled = _tanh_gelu("mil")
    assert "gelu" not in kinds(spelled.program) and "tanh" in kinds(spelled.program)
    assert spelled.passes.pipeline.left_out == LEFT_OUT_FOR_MIL
    fused = _tanh_gelu("mil", "fuse-all")
    assert kinds(fused.program) == ["gelu"]
    assert_agrees(fused)
    body, weights = _gelu_tanh(1)
    keys = {
        KernelRequest.create(graph=body, weights=weights, format="mil", passes=p).key
        for p in ("default", "fuse-all")
    }
    assert len(keys) == 2


def test_what_the_default_leaves_out_follows_the_op_records(monkeypatch):
    failing = facts.reported_failing()
    assert {"gelu", "layer_norm"} <= failing
    assert failing == {r.name for r in ops.records() if r.ane.status is AneStatus.REPORTED_FAILING}
    left = resolve(parse_passes("default"), ane_direct=True).left_out
    assert left == LEFT_OUT_FOR_MIL
    assert set(left) == {p for p in DEFAULT if PASSES[p].creates & failing}
    assert resolve(parse_passes("default")).left_out == ()
    assert resolve(parse_passes("fuse-all"), ane_direct=True).left_out == ()
    # read from the records when asked: records that report gelu and layer_norm working leave
    # nothing out
    fine = ("gelu", "layer_norm")
    working = tuple(replace(r, ane=AneFacts()) if r.name in fine else r for r in ops.records())
    monkeypatch.setattr(ops, "RECORDS", working)
    assert not set(fine) & facts.reported_failing()
    assert resolve(parse_passes("default"), ane_direct=True).left_out == ()


BAD_CHOICES = [
    ("fastest", "passes"),
    (["dead_code_elimination", "fuse_everything"], "passes[1]"),
    ([], "passes"),
    (3, "passes"),
    ({"pipeline": "default", "extra": 1}, "passes"),
    ({"pipeline": {"pipeline": "none"}}, "passes"),
    (
        {"pipeline": "none", "options": {"fuse_gelu_exact": {"x": 1}}},
        "passes.options.fuse_gelu_exact",
    ),
    (
        {
            "pipeline": ["const_elimination"],
            "options": {"const_deduplication": {"const_threshold": 1}},
        },
        "passes.options.const_deduplication",
    ),
    (
        {"pipeline": "default", "options": {"const_deduplication": {"threshold": 1}}},
        "passes.options.const_deduplication.threshold",
    ),
    (
        {"pipeline": "default", "options": {"const_deduplication": {"const_threshold": -1}}},
        "passes.options.const_deduplication.const_threshold",
    ),
    (
        {"pipeline": "default", "options": {"const_elimination": {"skip_const_by_size": "big"}}},
        "passes.options.const_elimination.skip_const_by_size",
    ),
]


@pytest.mark.parametrize(("passes", "field"), BAD_CHOICES)
def test_a_bad_choice_is_refused_naming_its_field(passes, field):
    with pytest.raises(RequestError) as caught:
        _golden("mil", passes=passes)
    assert caught.value.field == field


def test_a_kernel_request_takes_no_passes():
    with pytest.raises(RequestError) as caught:
        KernelRequest.create(
            "conv", {"in_channels": 4, "out_channels": 4, "spatial": 2}, passes="none"
        )
    assert caught.value.field == "passes"


def test_passes_survive_the_job_record_and_old_records_were_built_as_written():
    chosen = {"pipeline": "default", "options": {"const_deduplication": {"const_threshold": 8}}}
    for passes in (None, "none", "fuse-all", ["noop_elimination"], chosen):
        request = _golden("mil", passes=passes)
        again = KernelRequest.from_json(request.to_json())
        assert again.passes == request.passes and again.key == request.key
        assert pickle.loads(pickle.dumps(request)).key == request.key  # to a build process
    record = _golden("mil").to_json()
    del record["passes"]  # written before passes existed
    assert KernelRequest.from_json(record).key == BEFORE_PASSES["mil"][0]


def test_a_pass_that_changes_the_interface_is_caught():
    def rename_output(edit, options):
        edit.fn.outputs[0].name = "renamed"
        edit.changed = True

    def read_too_early(edit, options):
        ops = edit.fn.operations
        ops.insert(0, ops.pop())
        edit.changed = True

    b = Builder("ios18")
    y = b.op("relu", "y", x=b.input("x", DType.FP16, (1, 4)))
    z = b.op("exp", "z", x=y)
    program = b.build([z])
    for broken in (rename_output, read_too_early):
        bad = Pipeline(
            parse_passes("none"), (Step(GraphPass(broken.__name__, "cleanup", "", broken), {}),)
        )
        with pytest.raises(PassError, match=broken.__name__):
            run_pipeline(program, bad)
    assert [v.name for v in program.main.outputs] == ["z"]  # the program given is left as it was


def test_the_program_as_built_is_kept_and_verification_composes_it():
    request = _golden("mlpackage", verify=True)
    prepared = artifacts.prepare(request)
    assert prepared.verified
    assert kinds(prepared.build.built_program) == ["conv", "add", "real_div", "relu"]
    assert kinds(prepared.build.program) == ["conv", "relu"]


def test_an_fp32_graph_that_overflows_fp16_fails_verification_under_the_default_only():
    """docs/passes.md: computing in fp16 (add_fp16_cast) overflows where fp32 did not, and the
    verification report names the output; under "none" the same graph computes in fp32."""
    body = graph(
        [node("m", "mul", {"x": "x"}), node("e", "exp", {"x": "m"})],
        {"y": "e"},
        x=([1, 4, 1, 4], "fp32"),
    )
    weights = {"m.y": np.array([20.0], np.float32)}  # exp of up to 20: past fp16's 65,504
    with np.errstate(over="ignore"):
        fp32, fp16 = (verify_build(build(body, weights, p)) for p in ("none", "default"))
    assert fp32["passed"] and fp32["outputs"]["y"]["passed"]
    assert not fp16["passed"] and not fp16["outputs"]["y"]["passed"]


# -- the edges ------------------------------------------------------------------------------------
@pytest.mark.slow  # the live service
def test_over_http_a_graph_takes_passes_and_a_bad_one_is_a_422(client):
    body = {**_json_body(), "format": "mil"}
    plain = client.post("/v1/graphs", json={**body, "passes": "none"})
    fused = client.post("/v1/graphs", json=body)
    assert plain.status_code == fused.status_code == 200, fused.text
    assert hashlib.sha256(plain.content).hexdigest() == BEFORE_PASSES["mil"][1]
    with zipfile.ZipFile(io.BytesIO(fused.content)) as zf:
        assert json.loads(zf.read("kernel.json"))["passes"]["ops_after"] == 9
    assert_problem(client.post("/v1/graphs", json={**body, "passes": ["nope"]}), 422, "passes[0]")
    job = client.post("/v1/jobs", json={**body, "passes": "fuse-all"}).json()
    assert job["request"]["passes"] == "fuse-all"


def _json_body() -> dict:
    nodes = [
        {
            **n,
            "weights": {
                k.split(".")[1]: v.tolist()
                for k, v in GOLDEN_WEIGHTS.items()
                if k.startswith(n["id"] + ".")
            },
        }
        for n in GOLDEN_BODY["nodes"]
    ]
    return {**GOLDEN_BODY, "nodes": nodes, "name": "golden"}


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, check=False
    )


@pytest.mark.slow  # CLI subprocesses
def test_compile_graph_takes_passes_and_its_summary_prints_one_line_of_them(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({**_json_body(), "format": "mil"}))
    default = _cli("compile-graph", str(path), "-o", str(tmp_path / "d.zip"))
    assert default.returncode == 0, default.stderr
    line = next(x for x in default.stdout.splitlines() if x.startswith("passes"))
    assert line.startswith("passes default: 12 ops -> 9 (")
    assert "fuse_conv_bias -" in line and "divide_to_multiply -2+2" in line
    none = _cli("compile-graph", str(path), "--passes", "none", "-o", str(tmp_path / "n.zip"))
    assert none.returncode == 0 and "passes" not in none.stdout
    assert hashlib.sha256((tmp_path / "n.zip").read_bytes()).hexdigest() == BEFORE_PASSES["mil"][1]
    listed = _cli(
        "compile-graph",
        str(path),
        "--passes",
        "divide_to_multiply,dead_code_elimination",
        "-o",
        str(tmp_path / "l.zip"),
    )
    assert "passes custom: 12 ops -> 12 (divide_to_multiply -2+2)" in listed.stdout
    bad = _cli("compile-graph", str(path), "--passes", "fastest", "-o", str(tmp_path / "b.zip"))
    assert bad.returncode == 2 and "passes" in bad.stderr and not (tmp_path / "b.zip").exists()


@pytest.mark.slow  # a CLI subprocess
def test_phase_one_patterns_compile_to_the_fused_program_as_mlmodelc_and_verify(tmp_path):
    """A new user's graph: duplicate weights, a division by a constant, identity ops, a conv
    then a per-channel scale and bias, transposes that cancel, chained reshapes, the tanh GELU
    spelt out. Under the default pipeline, compiled to .mlmodelc here (the linux backend), it
    verifies, and what is left is the fused program."""
    w = values(8, 8)
    nodes = [
        node("c", "mil.conv", {"x": "x"}),
        node("scale", "mul", {"x": "c"}),
        node("shift", "add", {"x": "scale"}),
        node("half", "real_div", {"x": "shift"}),
        node("same", "reshape", {"x": "half"}, shape=[1, 8, 1, 6]),
        node("zero", "add", {"x": "same"}),
        node("t1", "transpose", {"x": "zero"}, perm=[0, 3, 2, 1]),
        node("act", "relu", {"x": "t1"}),
        node("t2", "transpose", {"x": "act"}, perm=[0, 3, 2, 1]),
        node("c2", "mil.conv", {"x": "t2"}),
        node("r1", "reshape", {"x": "c2"}, shape=[8, 6]),
        node("r2", "reshape", {"x": "r1"}, shape=[1, 8, 1, 6]),
    ]
    weights = {
        "c.weight": w.reshape(8, 8, 1, 1),
        "c2.weight": w.reshape(8, 8, 1, 1),  # the same weight twice
        "scale.y": values(1, 8, 1, 1, low=0.5),
        "shift.y": values(1, 8, 1, 1),
        "half.y": np.array([2.0], np.float32),
        "zero.y": np.zeros((1,), np.float32),
    }
    body = graph(nodes, {"y": "r2"}, x=([1, 8, 1, 6], "fp16"))
    body["nodes"] = [
        {
            **n,
            "weights": {
                k.split(".")[1]: v.tolist()
                for k, v in weights.items()
                if k.startswith(n["id"] + ".")
            },
        }
        for n in body["nodes"]
    ]
    path = tmp_path / "g.json"
    path.write_text(json.dumps({**body, "verify": True}))
    out = tmp_path / "g.mlmodelc.zip"
    done = _cli("compile-graph", str(path), "--format", "mlmodelc", "-o", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    assert "verify: passed" in done.stdout
    with zipfile.ZipFile(out) as zf:
        report = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("kernel.json"))))[
            "passes"
        ]
    kept = build(
        body | {"nodes": [{k: v for k, v in n.items() if k != "weights"} for n in body["nodes"]]},
        weights,
        "default",
    )
    # the reshapes back to the shape they started from go too
    assert kinds(kept.program) == ["conv", "relu", "conv"]
    assert report["ops_after"] == len(kept.program.main.operations)
    assert changed_by(kept)  # and the report names what did it


def _phase_two_graph() -> tuple[dict, dict]:
    """A new user's layer with every pattern the issue names: a conv then a batch norm, a
    LayerNorm over the channels spelt out, a GELU through erf, a division by a constant, a
    reshape to the same shape, an add of 0 and a mul by 1, a relu between transposes that cancel,
    reshapes that chain back, the same weight in two convs, and two dead branches: a second relu
    of what the first reads (merged into it) and a constant computed from a weight."""
    C, S = 16, 6  # a 16×16 weight: above const_deduplication's threshold of 100 elements
    shared = values(C, C, 1, 1, low=-0.3, high=0.3)
    nodes = [
        node("c", "mil.conv", {"x": "x"}),
        node("bn", "batch_norm", {"x": "c"}),
        node("mean", "reduce_mean", {"x": "bn"}, axes=[1], keep_dims=True),
        node("centred", "sub", {"x": "bn", "y": "mean"}),
        node("sq", "square", {"x": "centred"}),
        node("var", "reduce_mean", {"x": "sq"}, axes=[1], keep_dims=True),
        node("ve", "add", {"x": "var"}),
        node("r", "rsqrt", {"x": "ve"}),
        node("normed", "mul", {"x": "centred", "y": "r"}),
        node("scaled", "mul", {"x": "normed"}),
        node("ln", "add", {"x": "scaled"}),
        node("gd", "real_div", {"x": "ln"}),
        node("ge", "erf", {"x": "gd"}),
        node("g1", "add", {"x": "ge"}),
        node("gh", "mul", {"x": "g1"}),
        node("gelu", "mul", {"x": "ln", "y": "gh"}),
        node("half", "real_div", {"x": "gelu"}),
        node("same", "reshape", {"x": "half"}, shape=[1, C, 1, S]),
        node("zero", "add", {"x": "same"}),
        node("one", "mul", {"x": "zero"}),
        node("t1", "transpose", {"x": "one"}, perm=[0, 3, 2, 1]),
        node("act", "relu", {"x": "t1"}),
        node("t2", "transpose", {"x": "act"}, perm=[0, 3, 2, 1]),
        node("r1", "reshape", {"x": "t2"}, shape=[C, S]),
        node("r2", "reshape", {"x": "r1"}, shape=[1, C, 1, S]),
        node("c2", "mil.conv", {"x": "r2"}),
        node("c3", "mil.conv", {"x": "c2"}),
        node("a1", "relu", {"x": "c3"}),
        node("a2", "relu", {"x": "c3"}),
        node("both", "add", {"x": "a1", "y": "a2"}),
        node("k", "exp", {}),
        node("k16", "cast", {"x": "k"}, dtype="fp16"),
        node("y", "mul", {"x": "both", "y": "k16"}),
    ]
    weights = {
        "c.weight": values(C, C, 1, 1, low=-0.3, high=0.3),
        "bn.mean": values(C),
        "bn.variance": values(C, low=0.5, high=2.0),
        "bn.gamma": values(C),
        "bn.beta": values(C),
        "ve.y": np.array([1e-5], np.float32),
        "scaled.y": values(1, C, 1, 1, low=0.5, high=1.5),
        "ln.y": values(1, C, 1, 1),
        "gd.y": np.array([np.sqrt(2)], np.float32),
        "g1.y": np.array([1.0], np.float32),
        "gh.y": np.array([0.5], np.float32),
        "half.y": np.array([2.0], np.float32),
        "zero.y": np.zeros((1,), np.float32),
        "one.y": np.ones((1, C, 1, 1), np.float32),
        "c2.weight": shared,
        "c3.weight": shared,
        "k.x": values(1, C, 1, 1),
    }
    return graph(nodes, {"out": "y"}, x=([1, C, 1, S], "fp16")), weights


@pytest.mark.slow  # a CLI subprocess
def test_phase_two_patterns_compile_to_the_fused_program_as_mlmodelc_and_verify(tmp_path):
    body, weights = _phase_two_graph()
    inline = [
        {
            **n,
            "weights": {
                k.split(".")[1]: v.tolist()
                for k, v in weights.items()
                if k.startswith(n["id"] + ".")
            },
        }
        for n in body["nodes"]
    ]
    path = tmp_path / "g.json"
    path.write_text(json.dumps({**body, "nodes": inline, "verify": True}))
    out = tmp_path / "g.mlmodelc.zip"
    done = _cli("compile-graph", str(path), "--format", "mlmodelc", "-o", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    assert "verify: passed" in done.stdout
    with zipfile.ZipFile(out) as zf:
        text = zf.read(next(n for n in zf.namelist() if n.endswith("model.mil"))).decode()
    made = re.findall(r"> (\w+) = (\w+)\((.*)\)\[name", text)
    assert [kind for _, kind, _ in made if kind != "const"] == [
        "conv",  # c with the batch norm folded in
        "layer_norm",
        "gelu",
        "mul",  # the division by 2
        "relu",  # between the transposes that cancelled
        "conv",
        "conv",
        "relu",  # a2 merged into a1
        "add",
        "mul",  # by exp(k), computed
    ]
    convs = {name: args for name, kind, args in made if kind == "conv"}
    weight = {name: re.search(r"weight = (\w+)", args).group(1) for name, args in convs.items()}
    assert weight["c3"] == weight["c2"]  # one const for the weight given twice
    assert text.count(f"{weight['c2']} = const()") == 1
    # and in-process, the same program under the default pipeline (Core ML's: all fused)
    built = build(body, weights, "default")
    assert kinds(built.program) == [kind for _, kind, _ in made if kind != "const"]
    assert_agrees(built)


@pytest.mark.slow  # the live service
def test_the_client_sends_passes(server):
    from app.client import Client

    weights = {k: v for k, v in GOLDEN_WEIGHTS.items()}
    with Client(server.url) as c:
        plain = c.compile_graph(GOLDEN_BODY, weights, format="mil", name="golden", passes="none")
        fused = c.compile_graph(
            {**GOLDEN_BODY, "passes": "none"},
            weights,
            format="mil",
            name="golden",
            passes="default",
        )
    assert hashlib.sha256(plain).hexdigest() == BEFORE_PASSES["mil"][1]
    with zipfile.ZipFile(io.BytesIO(fused)) as zf:
        assert json.loads(zf.read("kernel.json"))["passes"]["pipeline"] == "default"


def _catalog_examples():
    from app.catalog_build import build_kernel
    from app.kernels import CATALOG

    for name, op in CATALOG.items():
        for i, params in enumerate(op.examples):
            for target in ("ios17", "ios18"):
                try:
                    yield (
                        f"{name}[{i}] {target}",
                        build_kernel(name, params, random_seed=0, target=target),
                    )
                except RequestError:  # an example of an op only one target has
                    continue


def test_the_default_pipeline_leaves_every_catalog_example_as_it_is():
    """Catalog kernels go through the default pipeline for programs written by hand
    (`hand_written`: the default less topological_reorder and add_fp16_cast, for either kind of
    runtime), and it changes nothing in any example of any op: a pass that starts changing a
    hand-written program fails here (then it must show a gain, and the golden files and the
    generator version move with it). The two passes left out would change only what their
    authors chose: topological_reorder moves the attention blocks' value transpose to just
    before its reader (an order, no op more or less), and add_fp16_cast makes the one example
    that computes in fp32 (conv, weight_dtype fp32) compute in fp16."""
    written = [hand_written(ane_direct=False), hand_written(ane_direct=True)]
    assert all(set(AUTHORS_CHOICES) <= set(p.left_out) for p in written)
    default = resolve(parse_passes("default"))
    seen = set()
    for label, built in _catalog_examples():
        for pipeline in written:
            _, report = run_pipeline(built.program, pipeline)
            assert not report.changes, (label, report.to_json()["changes"])
        _, report = run_pipeline(built.program, default)
        for change in report.changes:
            seen.add(change.graph_pass)
            if change.graph_pass == "topological_reorder":
                assert change.reordered and label.split("[")[0] in (
                    "attention",
                    "decoder_layer",
                    "decoder_stack",
                ), label
            else:
                assert change.graph_pass in (
                    "add_fp16_cast",
                    "cast_optimization",
                    "dead_code_elimination",
                ), label
                assert label.startswith("conv[2]"), label  # weight_dtype fp32
    assert {"topological_reorder", "add_fp16_cast", "cast_optimization"} <= seen


def test_a_catalog_kernel_built_runs_the_pipeline_and_keeps_its_bytes(monkeypatch):
    """The build runs the hand-written pipeline on a catalog kernel (counted here, to see it),
    and a kernel it leaves as it is has no `passes` in kernel.json: its bytes are as before."""
    from app.kernels import KernelBuild

    request = KernelRequest.create(
        "scale", {"channels": 3, "spatial": 2}, {"scale": np.full(3, 0.5, np.float32)}
    )
    assert artifacts.prepare(request).build.passes is None
    ran = []
    through = KernelBuild.as_written_through

    def counted(build, pipeline):
        ran.append(pipeline)
        return through(build, pipeline)

    monkeypatch.setattr(KernelBuild, "as_written_through", counted)
    artifacts.prepare(request)
    assert ran == [hand_written(ane_direct=False)]


def test_a_catalog_kernel_whose_weights_make_an_op_do_nothing_loses_it():
    """What the passes do to a hand-written program can follow from its weights' values: an
    rmsnorm whose gain is all ones multiplies by one, and noop_elimination removes the mul (and
    the const). The build says so in kernel.json, still verifies against the op's definition,
    and keeps its preflight findings to itself (kernels sharing op and params share findings
    only when the passes left them as written)."""
    params = {"channels": 16, "spatial": 2}
    ones = KernelRequest.create("rmsnorm", params, {"weight": np.ones(16, np.float32)}, verify=True)
    prepared = artifacts.prepare(ones)
    assert prepared.verified
    changes = prepared.build.passes.to_json()["changes"]
    assert changes == [
        {"pass": "noop_elimination", "removed": {"const": ["weight"], "mul": ["y"]}, "added": {}}
    ]
    assert prepared.build.preflight_key() is None
    gains = KernelRequest.create("rmsnorm", params, {"weight": np.full(16, 0.5, np.float32)})
    assert artifacts.prepare(gains).build.preflight_key() is not None


def test_a_hand_written_programs_key_moves_with_the_pipeline(monkeypatch):
    """Since the pipeline's result can follow from a catalog kernel's or a kit's weights, their
    keys hold its version: a new pipeline never serves an artifact the old one built. A graph
    with passes "none" keeps the key it had before passes."""
    import app.kits.job as kit_job
    import app.request as request_module
    from app.kits.job import ModelRequest

    def keys() -> tuple[str, str, str]:
        kernel = KernelRequest.create("rmsnorm", {"channels": 16, "spatial": 2})
        relu = graph([node("y", "relu", {"x": "x"})], {"y": "y"})
        plain = KernelRequest.create(graph=relu, passes="none")
        kit = ModelRequest.create({"config.json": "sha256:" + "0" * 64}, {"format": "mil"})
        return kernel.key, plain.key, kit.key

    before = keys()
    monkeypatch.setattr(request_module, "HAND_WRITTEN_VERSION", VERSION + 1)
    monkeypatch.setattr(kit_job, "HAND_WRITTEN_VERSION", VERSION + 1)
    after = keys()
    assert after[0] != before[0] and after[2] != before[2]
    assert after[1] == before[1]


@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_every_primitive_case_builds_and_verifies_under_the_default_pipeline(fmt):
    """tests/primitive_cases.py: one small graph per use of each primitive. The default pipeline
    runs over each (nothing left out for the Core ML formats; gelu left spelt out for mil) and
    the program still verifies against the graph's float64 meaning: no pass writes an argument
    in a dtype the op does not take (upsample_bilinear's fp32 scale factors stay fp32). A case
    whose output has no Core ML feature type (a comparison's bool, a quantize's uint8) has no
    Core ML form: mlpackage refuses it, naming the output, and mil takes it."""
    from tests.primitive_cases import CASES

    changed, refused = set(), []
    for case in CASES:
        request = KernelRequest.create(
            graph=case.graph, weights=case.weights or None, name=case.id, format=fmt, verify=True
        )
        try:
            prepared = artifacts.prepare(request)
        except RequestError as exc:
            assert exc.field.startswith("outputs.") and "a Core ML model's output" in exc.message
            refused.append(case.id)
            continue
        assert prepared.verified, (case.id, prepared.verification)
        changed |= {c.graph_pass for c in prepared.build.passes.changes}
    assert {"add_fp16_cast", "noop_elimination"} <= changed  # the pipeline did run
    assert bool(refused) == (fmt == "mlpackage"), refused


def test_docs_passes_lists_all_54_by_the_seeds_groups_with_what_is_implemented():
    from pathlib import Path

    from app.passes.graph_pass import SEED_GROUPS

    page = (Path(__file__).resolve().parent.parent / "docs" / "passes.md").read_text()

    def table(heading: str) -> list[list[str]]:
        text = page.split(heading, 1)[1].split("\n## ", 1)[0]
        return [
            [cell.strip() for cell in line.strip("|").split("|")]
            for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| pass ")
        ]

    rows = table("## The catalogue")
    assert len(rows) == 54 and len({r[0] for r in rows}) == 54
    assert [g for g in dict.fromkeys(r[1] for r in rows)] == list(SEED_GROUPS)
    implemented = {r[0] for r in rows if r[2].startswith("implemented")}
    seed = {name for name, p in PASSES.items() if p.group != "ane"}
    assert implemented == seed
    assert all(PASSES[r[0]].group == r[1] for r in rows if r[0] in PASSES)
    assert all(
        r[2].startswith(("implemented", "waits on", "not applicable", "not yet")) for r in rows
    )
    # the passes beyond the seed, each with the preflight findings it removes
    beyond = table("## Beyond the seed")
    assert {r[0] for r in beyond if r[1] == "ane"} == set(PASSES) - seed


def test_consts_are_the_same_value_by_their_bits_in_any_layout():
    """same_value compares bytes (-0 is not 0, a NaN is itself) a block at a time, a transposed
    weight as it is laid out."""
    from app.passes.patterns import same_value

    w = np.random.default_rng(0).standard_normal((300, 2000)).astype(np.float16)
    b = Builder("ios18")
    later = w.T.copy()
    later[-1, -1] = -later[-1, -1]  # differs in the last block only
    zeros, nan = np.zeros((3, 2), np.float16), np.full((3, 2), np.nan, np.float16)
    consts = {
        name: b.const(name, value, DType.FP16)
        for name, value in {
            "t": w.T,
            "c": np.ascontiguousarray(w.T),
            "later": later,
            "zeros": zeros,
            "minus": -zeros,
            "nan": nan,
            "nan2": nan.copy(),
        }.items()
    }
    assert same_value(consts["t"], consts["c"]) and same_value(consts["c"], consts["t"])
    assert not same_value(consts["t"], consts["later"])
    assert not same_value(consts["zeros"], consts["minus"])
    assert same_value(consts["nan"], consts["nan2"])


def test_a_pass_handed_a_broken_program_is_not_blamed_for_it():
    """The result is checked once, at the end; a pass that fails on what an earlier pass broke
    sends the pipeline round again, checking after every pass: the error names the pass that
    broke the program, not the one that tripped over it."""

    def read_too_early(edit, options):
        ops = edit.fn.operations
        ops.insert(0, ops.pop())
        edit.changed = True

    def trips(edit, options):
        made = set(edit.fn.inputs)
        for op in edit.fn.operations:
            assert all(v in made for v in op.inputs.values()), "handed a broken program"
            made.update(op.outputs)

    b = Builder("ios18")
    y = b.op("relu", "y", x=b.input("x", DType.FP16, (1, 4)))
    program = b.build([b.op("exp", "z", x=y)])
    steps = tuple(
        Step(GraphPass(f.__name__, "cleanup", "", f), {}) for f in (read_too_early, trips)
    )
    with pytest.raises(PassError, match="read_too_early"):
        run_pipeline(program, Pipeline(parse_passes("none"), steps))
