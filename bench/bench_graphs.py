"""Graph benchmarks, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_graphs

1. Build cost per node: chains of 10, 100 and 1,000 primitive nodes (add, mul, relu, silu in
   turn) on a [1, 64, 1, 16] input, built into one program, preflighted and zipped as a mil
   bundle. Target: flat, not growing with the graph's size.
2. A 5-node SwiGLU FFN to a zipped .mlpackage, against the same program through coremltools'
   MIL builder + ct.convert + save, in one process, alternating: at D=512, H=1408, S=64 (the
   example of the graphs issue: 6.3 MB of fp16 weights) and at D=128, H=352 (0.4 MB).
   Target: >= 100× faster.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time

import numpy as np

S = 64
SIZES = ((512, 1408), (128, 352))
PRIMS = ["add", "mul", "relu", "silu"]


def _chain(count: int) -> dict:
    nodes = []
    for i in range(count):
        op = PRIMS[i % len(PRIMS)]
        prev = f"n{i - 1}" if i else "x"
        inputs = {"x": prev, "y": "x"} if op in ("add", "mul") else {"x": prev}
        nodes.append({"id": f"n{i}", "op": op, "inputs": inputs})
    return {"inputs": {"x": {"shape": [1, 64, 1, 16]}}, "nodes": nodes,
            "outputs": {"y": f"n{count - 1}"}}  # fmt: skip


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_node() -> list[dict]:
    from app import artifacts
    from app.request import KernelRequest

    rows = []
    for count in (10, 100, 1000):
        request = KernelRequest.create(graph=_chain(count), format="mil", name="chain")

        def build(request=request) -> None:
            artifacts.zip_bytes(artifacts.prepare(request))

        build()  # warm
        seconds = _median(build, 9 if count < 1000 else 5)
        rows.append({"nodes": count, "ms": seconds * 1e3, "us_per_node": seconds / count * 1e6})
    return rows


def ffn_against_coremltools(D: int, H: int, rounds: int = 5) -> dict:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct
        from coremltools.converters.mil import Builder as mb
        from coremltools.converters.mil.mil import types

    from app import artifacts
    from app.graphs.examples import swiglu_ffn
    from app.request import KernelRequest

    rng = np.random.default_rng(0)
    w = {
        "gate": (rng.standard_normal((H, D, 1, 1)) * D**-0.5).astype(np.float16),
        "up": (rng.standard_normal((H, D, 1, 1)) * D**-0.5).astype(np.float16),
        "down": (rng.standard_normal((D, H, 1, 1)) * H**-0.5).astype(np.float16),
    }
    request = KernelRequest.create(
        graph=swiglu_ffn(D, H, S), weights={f"{k}.weight": v for k, v in w.items()}, name="ffn"
    )

    def ours() -> None:
        artifacts.zip_bytes(artifacts.prepare(request))

    def theirs() -> None:
        @mb.program(input_specs=[mb.TensorSpec((1, D, 1, S), dtype=types.fp16)],
                    opset_version=ct.target.iOS18)  # fmt: skip
        def prog(x):
            gate = mb.conv(x=x, weight=w["gate"], name="gate")
            up = mb.conv(x=x, weight=w["up"], name="up")
            h = mb.mul(x=mb.silu(x=gate, name="act"), y=up, name="h")
            return mb.conv(x=h, weight=w["down"], name="y")

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                               compute_precision=ct.precision.FLOAT16)  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            model.save(os.path.join(tmp, "ffn.mlpackage"))

    ours(), theirs()  # warm both paths
    t_ours, t_theirs = [], []
    for _ in range(rounds):  # alternating, so a neighbour's load hits both alike
        t_theirs.append(_median(theirs, 1))
        t_ours.append(_median(ours, 5))
    mine, other = statistics.median(t_ours), statistics.median(t_theirs)
    return {"ours_ms": mine * 1e3, "coremltools_ms": other * 1e3, "speedup": other / mine}


def main() -> None:
    rows = per_node()
    print("| graph (chain of primitives → mil zip) | build + preflight + zip | per node |")
    print("|---|---:|---:|")
    for row in rows:
        print(f"| {row['nodes']} nodes | {row['ms']:.1f} ms | {row['us_per_node']:.0f} µs |")
    first, last = rows[0]["us_per_node"], rows[-1]["us_per_node"]
    print(f"\nper-node cost at 1,000 nodes / at 10 nodes: {last / first:.2f} (target: flat)\n")
    print("| benchmark | ours | reference | ratio | target |")
    print("|---|---|---|---|---|")
    for d, h in SIZES:
        r = ffn_against_coremltools(d, h)
        print(f"| SwiGLU FFN D={d} H={h} S={S} → zipped .mlpackage | {r['ours_ms']:.2f} ms | "
              f"MIL builder + ct.convert + save {r['coremltools_ms']:.0f} ms | "
              f"{r['speedup']:.0f}× faster | ≥ 100× |")  # fmt: skip


if __name__ == "__main__":
    main()
