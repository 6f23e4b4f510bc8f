"""Graph-pass benchmarks, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_passes

The default pipeline (app/passes) over graphs of 10, 100 and 1,000 nodes, against building the
same program from the graph request (app/graphs: the builder with its type inference and value
checks), each the median of several runs in the same process, alternating. Two graphs:

- "nothing to fuse": the chain of primitives bench_graphs builds (add, mul, relu, silu in turn
  on a [1, 64, 1, 16] input): every pass looks at every op and changes nothing;
- "a layer to fuse every 4 nodes": conv -> add(bias) -> real_div(2) -> relu repeated on
  [1, 16, 1, 16] with 16×16 weights: each block becomes one conv and its relu.

Targets: the pipeline's cost per node flat from 10 to 1,000 nodes, and no more than the build's.

Then what the pipeline would cost the catalog's kernels, which do not run it (docs/passes.md):
every example of every catalog op, for ios17 and ios18, built, then through the default pipeline
and through it without the two passes that change anything there (topological_reorder,
add_fp16_cast); the totals over all examples, each the median of alternating runs.
"""

from __future__ import annotations

import numpy as np

from bench.bench_graphs import _median

PRIMS = ["add", "mul", "relu", "silu"]
C = 16


def _primitives(count: int) -> tuple[dict, dict]:
    nodes = []
    for i in range(count):
        op = PRIMS[i % len(PRIMS)]
        prev = f"n{i - 1}" if i else "x"
        inputs = {"x": prev, "y": "x"} if op in ("add", "mul") else {"x": prev}
        nodes.append({"id": f"n{i}", "op": op, "inputs": inputs})
    body = {
        "inputs": {"x": {"shape": [1, 64, 1, 16]}},
        "nodes": nodes,
        "outputs": {"y": nodes[-1]["id"]},
    }
    return body, {}


def _layers(count: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(0)
    nodes, weights, prev = [], {}, "x"
    for i in range(count):
        kind = ("mil.conv", "add", "real_div", "relu")[i % 4]
        node = {"id": f"n{i}", "op": kind, "inputs": {"x": prev}}
        if kind == "mil.conv":
            weights[f"n{i}.weight"] = (rng.standard_normal((C, C, 1, 1)) / 4).astype(np.float32)
        elif kind == "add":
            weights[f"n{i}.y"] = rng.standard_normal((1, C, 1, 1)).astype(np.float32)
        elif kind == "real_div":
            weights[f"n{i}.y"] = np.array([2.0], np.float32)
        nodes.append(node)
        prev = f"n{i}"
    body = {"inputs": {"x": {"shape": [1, C, 1, 16]}}, "nodes": nodes, "outputs": {"y": prev}}
    return body, weights


def measure(make, count: int) -> dict:
    from app.graphs.build import build_graph
    from app.graphs.spec import GraphParams
    from app.passes import parse_passes, resolve, run_pipeline

    body, weights = make(count)
    graph = GraphParams.model_validate(body)
    pipeline = resolve(parse_passes("default"))
    program = build_graph(graph, weights).program
    _, report = run_pipeline(program, pipeline)  # warm, and what it does
    repeat = 15 if count < 1000 else 5
    build_s, passes_s = [], []
    for _ in range(3):  # alternating, so that drift on the machine hits both
        build_s.append(_median(lambda: build_graph(graph, weights), repeat))
        passes_s.append(_median(lambda: run_pipeline(program, pipeline), repeat))
    build, passes = min(build_s), min(passes_s)
    return {
        "nodes": count,
        "ops": (report.ops_before, report.ops_after),
        "build_us_per_node": build / count * 1e6,
        "passes_us_per_node": passes / count * 1e6,
        "ratio": passes / build,
    }


def catalog() -> dict:
    from app.catalog_build import build_kernel
    from app.errors import RequestError
    from app.kernels import CATALOG
    from app.passes import DEFAULT, parse_passes, resolve, run_pipeline

    examples = []
    for name, op in CATALOG.items():
        for params in op.examples:
            for target in ("ios17", "ios18"):
                try:
                    build_kernel(name, params, random_seed=0, target=target)
                except RequestError:  # an example of an op only one target has
                    continue
                examples.append((name, params, target))
    built = [build_kernel(n, p, random_seed=0, target=t).program for n, p, t in examples]
    default = resolve(parse_passes("default"))
    kept = resolve(
        parse_passes([n for n in DEFAULT if n not in ("topological_reorder", "add_fp16_cast")])
    )

    def build_all():
        for n, p, t in examples:
            build_kernel(n, p, random_seed=0, target=t)

    def through(pipeline):
        return lambda: [run_pipeline(program, pipeline) for program in built]

    times: dict[str, list[float]] = {"build": [], "default": [], "kept": []}
    for _ in range(3):
        times["build"].append(_median(build_all, 3))
        times["default"].append(_median(through(default), 3))
        times["kept"].append(_median(through(kept), 3))
    best = {k: min(v) for k, v in times.items()}
    return {"examples": len(examples), **best}


def main() -> None:
    for title, make in (
        ("nothing to fuse", _primitives),
        ("a layer to fuse every 4 nodes", _layers),
    ):
        print(f"\n{title}\n")
        print(
            "| nodes | program ops before → after | build per node | default pipeline per node | pipeline / build |"
        )
        print("|---:|---:|---:|---:|---:|")
        rows = [measure(make, n) for n in (10, 100, 1000)]
        for r in rows:
            before, after = r["ops"]
            print(
                f"| {r['nodes']:,} | {before} → {after} | {r['build_us_per_node']:.0f} µs | "
                f"{r['passes_us_per_node']:.0f} µs | {r['ratio']:.2f} |"
            )
        flat = rows[-1]["passes_us_per_node"] / rows[0]["passes_us_per_node"]
        print(f"\npipeline per node at 1,000 / at 10: {flat:.2f}")
    c = catalog()
    print(f"\nthe catalog's {c['examples']} examples, all of them\n")
    print("| build | default pipeline | without topological_reorder, add_fp16_cast |")
    print("|---:|---:|---:|")
    print(
        f"| {c['build'] * 1e3:.1f} ms | {c['default'] * 1e3:.1f} ms ({c['default'] / c['build']:.2f}×) "
        f"| {c['kept'] * 1e3:.1f} ms ({c['kept'] / c['build']:.2f}×) |"
    )


if __name__ == "__main__":
    main()
