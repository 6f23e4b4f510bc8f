"""The default pipeline over a kit's hand-written programs (its decoder chunks and its head
pieces, as a kit builds them for a small Llama): like the catalog's kernels
(tests/test_passes_pipeline.py), they are left exactly as they are by every pass but
topological_reorder (an order: the attention blocks' value transpose moved next to its reader)
and add_fp16_cast (none of a kit's programs computes in fp32). Kits do not run the passes; this
holds what running them would change: nothing but an order."""

from __future__ import annotations

from kit_support import KIT_LLAMA, write_model

import app.kits.build as kit_build
from app.passes import DEFAULT, parse_passes, resolve, run_pipeline


def test_the_default_pipeline_leaves_a_kits_programs_as_they_are(tmp_path, monkeypatch):
    built = []
    prepare = kit_build.prepare

    def keep(program, limits):
        prepared = prepare(program, limits)
        built.append((program.name, prepared.build.program))
        return prepared

    monkeypatch.setattr(kit_build, "prepare", keep)
    folder = write_model(tmp_path / "llama", KIT_LLAMA, seed=0)
    kit_build.build_kit_files(folder, kit_build.KitOptions(format="mil"))
    assert sorted(name for name, _ in built) == ["decoder_0", "head_0", "head_1"]

    default = resolve(parse_passes("default"))
    kept = resolve(parse_passes([n for n in DEFAULT if n != "topological_reorder"]))
    reordered = set()
    for name, program in built:
        _, report = run_pipeline(program, kept)
        assert not report.changes, (name, [c.graph_pass for c in report.changes])
        _, report = run_pipeline(program, default)
        assert all(c.graph_pass == "topological_reorder" and c.reordered for c in report.changes)
        assert all(not c.removed and not c.added for c in report.changes)
        reordered |= {name for _ in report.changes}
    assert reordered == {"decoder_0"}  # its attention's value transpose
