"""The default pipeline over a kit's hand-written programs (its decoder chunks and its head
pieces, as a kit builds them for a small Llama). A kit builds each program through the default
pipeline for programs written by hand (`hand_written`), which leaves every one as it is: no
`passes` in its build, its files as before. Like the catalog's kernels
(tests/test_passes_pipeline.py), the full default would change one thing only, an order:
topological_reorder moves the attention blocks' value transpose next to its reader (and
add_fp16_cast finds nothing: none of a kit's programs computes in fp32)."""

from __future__ import annotations

from kit_support import KIT_LLAMA, write_model

import app.kits.build as kit_build
from app.passes import hand_written, parse_passes, resolve, run_pipeline


def test_a_kit_runs_the_pipeline_and_it_leaves_the_programs_as_they_are(tmp_path, monkeypatch):
    built = []
    prepare = kit_build.prepare

    def keep(program, limits):
        prepared = prepare(program, limits)
        built.append((program.name, prepared.build))
        return prepared

    monkeypatch.setattr(kit_build, "prepare", keep)
    folder = write_model(tmp_path / "llama", KIT_LLAMA, seed=0)
    kit_build.build_kit_files(folder, kit_build.KitOptions(format="mil"))
    assert sorted(name for name, _ in built) == ["decoder_0", "head_0", "head_1"]
    assert all(build.passes is None for _, build in built)  # nothing changed: no report

    written = hand_written(ane_direct=True)  # the raw mil bundle's
    default = resolve(parse_passes("default"))
    reordered = set()
    for name, build in built:
        _, report = run_pipeline(build.program, written)
        assert not report.changes, (name, [c.graph_pass for c in report.changes])
        _, report = run_pipeline(build.program, default)
        assert all(c.graph_pass == "topological_reorder" and c.reordered for c in report.changes)
        assert all(not c.removed and not c.added for c in report.changes)
        reordered |= {name for _ in report.changes}
    assert reordered == {"decoder_0"}  # its attention's value transpose
