"""Graphs: a DAG of catalog ops and MIL primitives built into ONE program (every ANE dispatch
costs ~0.1 ms whatever it computes, so fused programs are how the hardware is used well)."""
