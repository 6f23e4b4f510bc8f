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

Then what the pipeline costs the catalog's kernels and the kits' programs, which go through the
default pipeline for programs written by hand (`hand_written`: the default less
topological_reorder and add_fp16_cast) and come out unchanged (docs/passes.md): every example
of every catalog op, for ios17 and ios18: its build, then that pipeline over it (and, for
comparison, the full default), each example's best of 9 rounds (the three in turn, example by
example), summed over all examples. And a tiny kit (a 2-layer Llama of hidden 64, vocabulary
512, written into a temporary folder) built as a mil kit with its pipeline and with it
replaced by "none", in turn, the best of 9 each.

And what the pipeline costs the programs it exists for, exports of real models: the ONNX
fixtures torch exported (tests/fixtures/onnx: BERT, ViT and a Whisper encoder, small) and the
BERT-base-shaped 12-layer export bench_onnx writes (external data, 415 MiB): each model's import
(its build: read, lowered, built) against the default pipeline over the program it built, in
turn, the best of 5 (2 for BERT-base).

    .venv/bin/python -m bench.bench_passes [--only graphs|catalog|kit|onnx]
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
    import time

    from app.catalog_build import build_kernel
    from app.errors import RequestError
    from app.kernels import CATALOG
    from app.passes import hand_written, parse_passes, resolve, run_pipeline

    examples = []
    for name, op in CATALOG.items():
        for params in op.examples:
            for target in ("ios17", "ios18"):
                try:
                    build_kernel(name, params, random_seed=0, target=target)
                except RequestError:  # an example of an op only one target has
                    continue
                examples.append((name, params, target))
    written = hand_written()
    default = resolve(parse_passes("default"))
    # Per example, each of the three timed in turn, round after round; each example's best of
    # the rounds, summed: on a shared machine a slow moment hits one sample, not a total.
    best: dict[str, list[float]] = {k: [float("inf")] * len(examples) for k in RUNS}
    for _ in range(9):
        for i, (n, p, t) in enumerate(examples):
            start = time.perf_counter()
            built = build_kernel(n, p, random_seed=0, target=t)
            middle = time.perf_counter()
            built.as_written_through(written)
            end = time.perf_counter()
            run_pipeline(built.program, default)
            last = time.perf_counter()
            for k, took in zip(RUNS, (middle - start, end - middle, last - end), strict=True):
                best[k][i] = min(best[k][i], took)
    return {"examples": len(examples), **{k: sum(v) for k, v in best.items()}}


RUNS = ("build", "written", "default")


def _tiny_llama(folder) -> None:
    """A 2-layer Llama checkpoint (hidden 64, 4 heads / 2 KV heads, vocabulary 512, tied), fp32
    safetensors."""
    import json
    import struct

    hidden, inter, vocab, layers = 64, 128, 512, 2
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": layers,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "tie_word_embeddings": True,
        "max_position_embeddings": 128,
    }
    kv = hidden // 2
    layer = {
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (hidden, hidden),
        "self_attn.k_proj.weight": (kv, hidden),
        "self_attn.v_proj.weight": (kv, hidden),
        "self_attn.o_proj.weight": (hidden, hidden),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
    }
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        shapes |= {f"model.layers.{i}.{n}": s for n, s in layer.items()}
    rng = np.random.default_rng(0)
    tensors = {
        n: (1 + 0.1 * rng.standard_normal(s) if len(s) == 1 else rng.standard_normal(s) / 8)
        .astype(np.float32)
        .tobytes()
        for n, s in shapes.items()
    }
    header, offset = {}, 0
    for n, s in shapes.items():
        header[n] = {
            "dtype": "F32",
            "shape": list(s),
            "data_offsets": [offset, offset + 4 * int(np.prod(s))],
        }
        offset += 4 * int(np.prod(s))
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(tensors.values()))


def kit() -> dict:
    import tempfile
    import time
    from pathlib import Path

    import app.kits.programs as programs
    from app.kits.build import KitOptions, build_kit_files
    from app.passes import NO_PASSES, hand_written, resolve

    none = resolve(NO_PASSES)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama"
        _tiny_llama(folder)
        options = KitOptions(format="mil")
        build_kit_files(folder, options)  # warm

        def timed(pipeline) -> float:
            programs.hand_written = lambda **_: pipeline  # type: ignore[assignment]
            try:
                start = time.perf_counter()
                build_kit_files(folder, options)
                return time.perf_counter() - start
            finally:
                programs.hand_written = hand_written

        times: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(9):
            times["with"].append(timed(hand_written(ane_direct=True)))
            times["without"].append(timed(none))
    return {k: min(v) for k, v in times.items()}


def onnx_models() -> list[dict]:
    import tempfile
    import time
    from pathlib import Path

    from app.language.targets import get_target
    from app.onnx.files import ModelFiles
    from app.onnx.importer import import_onnx
    from app.passes import parse_passes, resolve, run_pipeline
    from app.request import OnnxParams
    from bench import bench_onnx

    default = resolve(parse_passes("default"))

    def timed(name: str, path: Path, rounds: int) -> dict:
        imports, passes = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            built = import_onnx(
                OnnxParams(model=path.name),
                ModelFiles.in_folder(path),
                target=get_target("ios18"),
                name="bench",
            )
            middle = time.perf_counter()
            _, report = run_pipeline(built.program, default)
            imports.append(middle - start)
            passes.append(time.perf_counter() - middle)
        return {
            "model": name,
            "ops": (report.ops_before, report.ops_after),
            "import": min(imports),
            "passes": min(passes),
        }

    fixtures = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "onnx"
    rows = [timed(n, fixtures / f"{n}.onnx", 5) for n in ("bert", "vit", "whisper_encoder")]
    with tempfile.TemporaryDirectory() as tmp:
        paths = bench_onnx.save(bench_onnx.bert(12), Path(tmp), "bert")
        rows.append(timed("BERT-base-shaped (12 layers, external data)", paths["external"], 2))
    return rows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", choices=("graphs", "catalog", "kit", "onnx"), help="one part only"
    )
    only = parser.parse_args().only
    for title, make in (
        ("nothing to fuse", _primitives),
        ("a layer to fuse every 4 nodes", _layers),
    ):
        if only not in (None, "graphs"):
            break
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
    if only in (None, "catalog"):
        c = catalog()
        b = c["build"]
        print(f"\nthe catalog's {c['examples']} examples, all of them\n")
        print("| build | hand-written pipeline | full default pipeline |")
        print("|---:|---:|---:|")
        print(
            f"| {b * 1e3:.1f} ms | {c['written'] * 1e3:.1f} ms ({c['written'] / b:.2f}×) "
            f"| {c['default'] * 1e3:.1f} ms ({c['default'] / b:.2f}×) |"
        )
    if only in (None, "kit"):
        k = kit()
        print("\na tiny kit (2-layer Llama, hidden 64, mil)\n")
        print("| passes none | hand-written pipeline |")
        print("|---:|---:|")
        print(
            f"| {k['without'] * 1e3:.0f} ms | {k['with'] * 1e3:.0f} ms "
            f"({k['with'] / k['without']:.2f}×) |"
        )
    if only in (None, "onnx"):
        print("\nONNX exports: the import against the default pipeline over what it built\n")
        print(
            "| model | program ops before → after | import | default pipeline | pipeline / import |"
        )
        print("|---|---:|---:|---:|---:|")
        for r in onnx_models():
            before, after = r["ops"]
            print(
                f"| {r['model']} | {before} → {after} | {r['import'] * 1e3:.1f} ms "
                f"| {r['passes'] * 1e3:.1f} ms | {r['passes'] / r['import']:.2f} |"
            )


if __name__ == "__main__":
    main()
