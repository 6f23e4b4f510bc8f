"""The placement summary: counts per device and a loud warning for every op not on the ANE.

The per-op lists are what `load_plan` extracts from MLComputePlan on a Mac (see
test_compile_macos.py for the real thing); here the summary logic runs on such lists.
"""

from app.compile import summarize
from app.compile.placement import placement_report, unavailable_reason


def op(name, kind, preferred, supported, cost=None):
    return {"name": name, "op": kind, "preferred": preferred, "supported": supported, "cost": cost}


def test_all_on_the_ane_has_no_warnings():
    s = summarize(
        [
            op("w", "const", None, []),
            op("y", "conv", "ane", ["ane", "cpu", "gpu"], 0.9),
            op("z", "cast", "ane", ["ane", "cpu"], 0.1),
        ]
    )
    assert (s["ops"], s["ane"], s["gpu"], s["cpu"], s["unplaced"]) == (3, 2, 0, 0, 1)
    assert s["all_on_ane"] is True and s["warnings"] == []
    assert s["compute_units"] == "CPU_AND_NE"


def test_ops_off_the_ane_are_named_with_the_reason():
    s = summarize(
        [
            op("mm", "matmul", "cpu", ["cpu", "gpu"], 0.75),
            op("sm", "softmax", "gpu", ["ane", "cpu", "gpu"], None),
            op("y", "add", "ane", ["ane", "cpu"], 0.05),
        ]
    )
    assert (s["ane"], s["gpu"], s["cpu"]) == (1, 1, 1)
    assert s["all_on_ane"] is False
    assert s["warnings"] == [
        "matmul 'mm' runs on the CPU, not the ANE (the ANE does not support it here, "
        "75% of the estimated cost)",
        "softmax 'sm' runs on the GPU, not the ANE (it could run on the ANE)",
    ]


def test_an_empty_plan_is_not_all_on_the_ane():
    assert summarize([])["all_on_ane"] is False


def test_report_says_why_it_is_missing_off_a_mac(tmp_path):
    reason = unavailable_reason()
    report = placement_report(tmp_path / "k.mlmodelc")
    if reason is not None:
        assert report == {"available": False, "reason": reason}
        assert "MLComputePlan" in reason or "coremltools" in reason
    else:  # a Mac: a missing model is reported, not raised
        assert report["available"] is False and "MLComputePlan failed" in report["reason"]
