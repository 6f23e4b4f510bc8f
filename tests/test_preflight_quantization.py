"""The quantization report table (format x chip family x path) and the findings a config earns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.preflight import (
    CHIP_FAMILIES,
    PATHS,
    REPORTS,
    RULES_BY_ID,
    Severity,
    Status,
    quantization_findings,
    quantization_reports,
    quantization_status,
    read_config,
    render_quantization_markdown,
)
from app.quantize import QuantizeConfigError

PALETTE4 = {"mode": "palettize", "nbits": 4}
INT8 = {"mode": "linear", "dtype": "int8", "granularity": "per_channel"}
INT4_BLOCK = {"mode": "linear", "dtype": "int4", "granularity": "per_block", "block_size": 32}
PRUNE = {"mode": "prune", "target_sparsity": 0.5}
SOURCE = re.compile(r"^fused-quantized-mlmodelc\.md §3\.[12]; [\w.-]+/[\w.-]+")


def test_every_report_has_a_source_a_known_chip_and_path():
    for report in REPORTS:
        assert SOURCE.match(report.source), report
        assert report.path in PATHS
        assert report.families is None or set(report.families) <= set(CHIP_FAMILIES)
        assert report.note


def test_rule_sources_name_every_project_the_rows_cite():
    """The quant rules' combined sources stay in step with the table's rows."""
    for report in REPORTS:
        if report.status is Status.WORKS:
            continue
        rule = (
            "quant.reported-failing" if report.status is Status.REPORTED_FAILING else "quant.slower"
        )
        project = report.source.split("; ")[1].split(" ")[0]
        assert project in RULES_BY_ID[rule].source, (project, rule)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"mode": "palettize", "nbits": 5}, "quantize.nbits"),
        ({"mode": "palettize"}, "quantize.nbits"),
        (
            {
                "mode": "palettize",
                "nbits": 4,
                "granularity": "per_grouped_channel",
                "group_size": 0,
            },
            "quantize.group_size",
        ),
        ({"mode": "linear", "granularity": "per_block", "block_size": 0}, "quantize.block_size"),
        ({"mode": "linear", "dtype": "int2"}, "quantize.dtype"),
        ({"mode": "linear", "symmetric": "yes"}, "quantize.symmetric"),
        ({"mode": "prune", "target_sparsity": 1.0}, "quantize.target_sparsity"),
        ({"mode": "prune", "target_sparsity": True}, "quantize.target_sparsity"),
        ({"mode": "prune", "target_sparsity": 0.5, "nbits": 4}, "quantize.nbits"),
        ({"mode": "kmeans"}, "quantize.mode"),
        ({}, "quantize.mode"),
        ([], "quantize"),
    ],
)
def test_bad_configs_name_the_field(config, field):
    with pytest.raises(QuantizeConfigError) as err:
        read_config(config)
    assert err.value.field == field


def test_int4_needs_ios18_and_bad_selections_name_the_field():
    with pytest.raises(QuantizeConfigError) as err:
        read_config({"mode": "linear", "dtype": "int4"}, target="ios17")
    assert err.value.field == "quantize.dtype"
    for kwargs, field in (({"chip": "M9"}, "chip"), ({"path": "metal"}, "path")):
        with pytest.raises(QuantizeConfigError) as err:
            quantization_findings(PALETTE4, **kwargs)
        assert err.value.field == field


def test_configs_lower_to_the_constexpr_op_of_their_target():
    assert read_config(PALETTE4).op == "constexpr_lut_to_dense"
    assert read_config(INT8, "ios17").op == "constexpr_affine_dequantize"
    assert read_config(INT8, "ios18").op == "constexpr_blockwise_shift_scale"
    assert read_config({**PRUNE, "dtype": "int8"}).describe() == "prune + int8"


def test_statuses_per_chip_and_path():
    # ironmill's h14g rejection is read as both M2 and M3.
    assert quantization_status(PALETTE4, "M2", "ane-direct") is Status.REPORTED_FAILING
    assert quantization_status(PALETTE4, "M3", "ane-direct") is Status.REPORTED_FAILING
    assert quantization_status(PALETTE4, "M1", "ane-direct") is Status.WORKS
    assert quantization_status(PALETTE4, "A18", "coreml") is Status.WORKS
    # The same int8 config is fine as ios17's affine op on A16 and reported failing as ios18's
    # blockwise op (a non-ANE op per executorch).
    assert quantization_status(INT8, "A16", "coreml", target="ios17") is Status.WORKS
    assert quantization_status(INT8, "A16", "coreml", target="ios18") is Status.REPORTED_FAILING
    assert quantization_status(INT8, "A17", "coreml", target="ios17") is Status.SLOWER
    assert quantization_status(INT8, "M4", "ane-direct", target="ios17") is Status.WORKS
    assert quantization_status(PRUNE, "M1", "coreml") is None


def test_palette_on_m1_earns_nothing():
    assert quantization_findings(PALETTE4, "M1") == []


def test_failing_palette_names_the_chips_and_the_reports_that_disagree():
    findings = quantization_findings(PALETTE4, "any", node="ffn.up")
    assert [(f.rule, f.severity, f.node) for f in findings] == [
        ("quant.reported-failing", Severity.WARNING, "ffn.up")
    ]
    (f,) = findings
    assert "ane-direct" in f.message and "M2, M3" in f.message and "h14g" in f.message
    assert "reported working by" in f.message and "sbryngelson/ANEForge" in f.message
    assert f.source.endswith("jafreck/ironmill ane-constraints.md, ane-runtime-behavior.md")


def test_int8_on_a17_is_slower_with_the_numbers():
    findings = quantization_findings(INT8, "A17", target="ios17", path="coreml")
    assert [f.rule for f in findings] == ["quant.slower"]
    assert "1.50 ms" in findings[0].message and "1.38 ms" in findings[0].message
    assert "opt-quantization-perf.md" in findings[0].source


def test_int4_per_block_collects_every_failure_report():
    findings = quantization_findings(INT4_BLOCK, "any", path="coreml")
    sources = " ".join(f.source for f in findings if f.rule == "quant.reported-failing")
    for issue in ("#279", "#55", "#205", "PR #110", "PR #19252"):
        assert issue in sources
    assert "cosine 0.367" in " ".join(f.message for f in findings)
    assert any(f.rule == "quant.slower" for f in findings)


def test_small_palette_groups_are_slower_on_core_ml():
    grouped = {**PALETTE4, "granularity": "per_grouped_channel"}
    slow = quantization_findings({**grouped, "group_size": 4}, "any", path="coreml")
    assert [f.rule for f in slow] == ["quant.slower"] and "8-16" in slow[0].message
    assert quantization_findings({**grouped, "group_size": 16}, "any", path="coreml") == []


def test_no_report_is_advice_per_path():
    findings = quantization_findings(PRUNE, "M1")
    assert [(f.rule, f.severity) for f in findings] == [("quant.no-report", Severity.ADVICE)]
    assert "coreml" in findings[0].message and "MLComputePlan" in findings[0].source
    both = quantization_findings(PRUNE, "A17")
    assert [f.rule for f in both] == ["quant.no-report", "quant.no-report"]


def test_findings_follow_table_order_and_are_deterministic():
    first = quantization_findings(INT4_BLOCK, "any")
    assert first == quantization_findings(INT4_BLOCK, "any")
    rows = quantization_reports(INT4_BLOCK, "any")
    assert rows == sorted(rows, key=REPORTS.index)
    paths = [f.message.split(" path")[0].rsplit(" ", 1)[-1] for f in first]
    assert paths == sorted(paths, key=["coreml", "ane-direct"].index)


def test_quantization_markdown_has_a_row_per_report():
    lines = render_quantization_markdown().splitlines()
    assert lines[0] == "| format | chips | path | status | reported | source |"
    assert len(lines) == len(REPORTS) + 2
    assert "| palettize 4-bit | M2, M3 | ane-direct | reported-failing |" in "\n".join(lines)


def test_the_quantization_page_carries_the_current_report_table():
    page = Path(__file__).resolve().parents[1] / "docs" / "quantization.md"
    assert render_quantization_markdown().strip() in page.read_text(encoding="utf-8")
