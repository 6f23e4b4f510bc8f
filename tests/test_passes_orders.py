"""A request may name any passes in any order (`passes: [names]`), not only the default's. Here
Hypothesis draws programs holding several of the planted patterns of test_passes_properties (each
planted whole or as its near-miss, some fed by the one before), and a list of passes drawn from
all of them, repeats allowed: the pipeline finishes (the runner's check finds no pass breaking
the program) and the program computes what it computed before, within the graph's fp16
tolerance. An fp32 program run through add_fp16_cast is only checked to finish: computing in
fp16 overflows and cancels where fp32 did not, which is fp16's doing, not a pass's."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from app.errors import RequestError
from app.passes import PASSES
from tests.graph_passes import assert_agrees, build, node
from tests.test_passes_properties import FP32, PLANTERS, PROFILE, UNARY, Shape


def _program(d) -> tuple[dict, dict]:
    s = Shape(
        d.draw(st.sampled_from([2, 4])),
        d.draw(st.sampled_from([1, 2, 3])),
        d.draw(st.sampled_from([1, 2, 4])),
    )
    planted = d.draw(st.lists(st.sampled_from(sorted(PLANTERS)), min_size=2, max_size=4))
    nodes, weights, outputs = [node("barrier", "mul", {"x": "x", "y": "x"})], {}, {}
    source = "barrier"
    for i, kind in enumerate(planted):
        site = PLANTERS[kind](d, f"s{i}_", source, s, d.draw(st.booleans()))
        nodes += [*site.nodes, node(f"s{i}_after", d.draw(st.sampled_from(UNARY)), {"x": site.out})]
        weights |= site.weights
        outputs |= {f"o{i}": f"s{i}_after", **(site.also or {})}
        if d.draw(st.booleans()):  # the next pattern reads what this one made
            source = f"s{i}_after"
    dtype = "fp32" if FP32 & set(planted) else d.draw(st.sampled_from(["fp16", "fp32"]))
    body = {"inputs": {"x": {"shape": list(s.full), "dtype": dtype}}, "nodes": nodes}
    return body | {"outputs": outputs}, weights


# Some draws (a tenth to a third) feed a pattern a shape it does not take and are refused before
# any pass: twice the usual draws, about 2 s on the idle 2-core machine.
@settings(PROFILE, max_examples=2 * PROFILE.max_examples)
@given(st.data())
def test_any_list_of_passes_keeps_the_program_whole_and_its_meaning(data):
    body, weights = _program(data)
    passes = data.draw(st.lists(st.sampled_from(sorted(PASSES)), min_size=1, max_size=12))
    fmt = data.draw(st.sampled_from(["mlpackage", "mil"]))
    try:
        built = build(body, weights, passes, fmt)
    except RequestError:  # a pattern fed a shape its planter does not take: the builder's
        event("refused")  # refusal, before any pass (tests/test_hostile_graphs.py holds those)
        return
    if body["inputs"]["x"]["dtype"] == "fp32" and "add_fp16_cast" in passes:
        event("finished, not compared")
        return
    event("compared")
    assert_agrees(built)
