"""The preflight over the real catalog, and its outputs: order, JSON, header summary, strict helper,
and the rule table (every rule sourced, rendered as the Markdown table of docs/preflight.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from kernel_cases import SMALL, VARIANTS

from app.catalog_build import build_kernel
from app.kernels import CATALOG
from app.mil import Builder, DType
from app.preflight import (
    RULES,
    Finding,
    Severity,
    findings_to_json,
    first_error,
    preflight,
    render_rules_markdown,
    summary_header,
)
from app.preflight.view import ProgramView

F16 = DType.FP16
RESEARCH_FILES = ("mil-text-and-blob.md", "fused-quantized-mlmodelc.md", "coremltools-linux.md")
# "<research file> §<section>...; <owner>/<repo or site>..."
SOURCE = re.compile(r"^(" + "|".join(map(re.escape, RESEARCH_FILES)) + r") §\S+.*; [\w.-]+/[\w.-]+")


def test_small_sizes_cover_the_catalog():
    assert set(SMALL) == set(CATALOG)


@pytest.mark.parametrize(("op", "params"), [*SMALL.items(), *VARIANTS], ids=str)
def test_catalog_kernels_have_no_errors(op, params):
    findings = preflight(build_kernel(op, params, random_seed=0).program)
    assert [f for f in findings if f.severity is Severity.ERROR] == []
    assert first_error(findings) is None


PALETTES = [{"mode": "palettize", "nbits": n} for n in (2, 4, 6, 8)] + [
    {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 2}
]


@pytest.mark.parametrize("quantize", PALETTES, ids=str)
@pytest.mark.parametrize("op", ["conv", "matmul", "ffn"])
def test_ios18_palettized_weights_are_not_rank_errors(op, quantize):
    """The iOS18 palette of a conv weight is a rank-6 const that only constexpr_lut_to_dense
    reads; coremltools accepts it, so the preflight reports no error for it."""
    build = build_kernel(op, SMALL[op], random_seed=0, target="ios18", quantize=quantize)
    findings = preflight(build.program)
    luts = [t for s, t in ProgramView(build.program).tensors() if t.rank > 5]
    assert luts or op != "conv", "the iOS18 conv palette should be rank 6"
    assert first_error(findings) is None, findings
    assert not any(f.rule.startswith("rank.") for f in findings)


def test_catalog_findings_are_the_io_and_state_notes_expected():
    """Small kernels are flagged for their small surfaces, not for their ops."""
    rules = {f.rule for f in preflight(build_kernel("conv", SMALL["conv"], random_seed=0).program)}
    assert {"io.surface-min", "io.width-align"} <= rules
    assert not any(r.startswith(("op.", "conv.", "rank.", "sdpa.")) for r in rules)
    state = preflight(build_kernel("read_state", SMALL["read_state"], random_seed=0).program)
    assert [f.node for f in state if f.rule == "state.ane-direct"] == ["kv"]


def _mixed_program():
    """Findings on an input, on ops in the middle, and on the output; two errors."""
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 64))
    r6 = b.op("reshape", "r6", x=x, shape=[1, 1, 1, 1, 4, 64])
    back = b.op("reshape", "back", x=r6, shape=[1, 4, 1, 64])
    w = b.const("W", np.zeros((4, 4, 1, 17), np.float16), F16)
    y = b.op("conv", "y", x=back, weight=w)
    return b.build([b.op("softmax", "s", x=y, axis=-1)])


def test_findings_are_in_program_order_and_deterministic():
    program = _mixed_program()
    findings = preflight(program)
    order = {v.name: i for i, v in enumerate(program.main.inputs)}
    for i, op in enumerate(program.main.operations, len(order)):
        order[op.name] = i
    positions = [order[f.node] for f in findings]
    assert positions == sorted(positions)
    assert findings[0].node == "x" and findings[-1].node == "s"
    # Within one node, rule-table order.
    table = [r.id for r in RULES]
    for node in {f.node for f in findings}:
        ids = [table.index(f.rule) for f in findings if f.node == node]
        assert ids == sorted(ids)
    assert preflight(_mixed_program()) == findings


def test_first_error_is_the_earliest_error():
    findings = preflight(_mixed_program())
    error = first_error(findings)
    assert error is not None
    assert (error.rule, error.node) == ("rank.core-ml-max", "r6")
    assert {f.rule for f in findings if f.severity is Severity.ERROR} == {
        "rank.core-ml-max",
        "conv.kernel-max",
    }


def test_json_form_round_trips():
    findings = preflight(_mixed_program())
    data = json.loads(json.dumps(findings_to_json(findings)))
    assert [list(d) for d in data] == [["rule", "severity", "node", "message", "source"]] * len(
        findings
    )
    assert [Finding(**{**d, "severity": Severity(d["severity"])}) for d in data] == findings


def test_summary_header():
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 2))
    findings = preflight(b.build([b.op("mul", "y", x=x, y=2.0)]))
    header = summary_header(findings)
    assert header == (
        "error=0 warning=4 advice=4; "
        "rules=io.surface-min,io.width-align,io.channel-align,io.row-stride"
    )
    assert summary_header([]) == "error=0 warning=0 advice=0"
    mixed = summary_header(preflight(_mixed_program()))
    assert mixed.startswith("error=2 ") and "rules=rank.core-ml-max,conv.kernel-max," in mixed
    assert mixed.isascii() and "\n" not in mixed


def test_every_rule_has_a_source_and_a_reason():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert re.fullmatch(r"[a-z0-9]+(\.[a-z0-9-]+)+", rule.id), rule.id
        assert SOURCE.match(rule.source), f"{rule.id} lacks a research section and project"
        assert rule.what
        if rule.check is not None:
            assert rule.check.__doc__, f"{rule.id}'s check does not say how it read the reports"


def test_rules_markdown_lists_every_rule():
    text = render_rules_markdown()
    lines = text.splitlines()
    assert lines[0] == "| id | severity | what | source |"
    rows = lines[2:]
    assert len(rows) == len(RULES)
    for rule, row in zip(RULES, rows, strict=True):
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        assert [c.strip() for c in cells] == [
            f"`{rule.id}`",
            rule.severity.value,
            rule.what,
            rule.source,
        ]


def test_the_preflight_page_carries_the_current_rule_table():
    """docs/preflight.md holds the rendered table, so a new or reworded rule shows there."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "preflight.md").read_text("utf-8")
    assert render_rules_markdown().strip() in page
