"""ONNX imports against onnxsim 0.8.1's `--emit-coreml`, side by side in one run.

    .venv/bin/pip install onnxsim==0.8.1     # for this benchmark only: not a dependency
    .venv/bin/python -m bench.bench_onnx [--layers 12] [--models bert,whisper]

Two exports written here with onnx.helper (random weights, opset 17, no torch), each saved with
its weights embedded and with them as external data:

- BERT-base-shaped: vocabulary 30,522, 12 layers of hidden 768, 12 heads, FFN 3,072, sequence
  128, the attention mask from an int64 input, GELU spelt with Erf as torch exports it;
- Whisper-small-encoder-shaped: 80 mel bins × 3,000 frames, two convolutions (the second
  stride 2) to 1,500 positions, 12 pre-norm layers of 768, 12 heads, FFN 3,072.

Measured for each:

- whole process: `ane-kernels onnx MODEL -o OUT.zip` (format mlpackage) against
  `onnxsim MODEL SIMPLIFIED --emit-coreml OUT.mlpackage` then zipping the package, each a fresh
  process, alternating, the best of `--rounds`; goal ≥ 4× faster;
- in process (after a warm-up build of the same model in that process): our import and
  artifact against `onnxsim.simplify` + `export_coreml` + zip; goal ≥ 30× faster; and the
  floor beside them: the external data's fp32 values read, rounded to fp16 and zipped, no graph
  (no importer can take less, so onnxsim's time over it is the most any importer can gain);
- peak RSS of our whole process (/usr/bin/time's maximum resident set) against the model's fp16
  weights:
  goal ≤ 1.5× with external data, ≤ 1.5× plus the file's size embedded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
HIDDEN, HEADS, FFN = 768, 12, 3072


def _graph_parts(layers: int, seq: int, rng: np.random.Generator):
    """(nodes, initializers) of `layers` transformer layers over `x` [1, seq, HIDDEN]; the
    attention adds `mask` [1, 1, 1, seq] when given; pre-norm (Whisper) or post-norm (BERT)."""
    from onnx import helper, numpy_helper

    nodes: list = []
    inits: list = []

    def w(name, shape, scale=0.02):
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
        )
        return name

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    const("heads_shape", np.array([1, seq, HEADS, HIDDEN // HEADS], np.int64))
    const("flat_shape", np.array([1, seq, HIDDEN], np.int64))
    const("scale", np.array(8.0, np.float32))
    const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    const("one", np.array(1.0, np.float32))
    const("half", np.array(0.5, np.float32))

    def linear(x, name, n_in, n_out, bias=True):
        y = node("MatMul", [x, w(f"{name}.weight", (n_in, n_out))], f"{name}.mm")
        return node("Add", [y, w(f"{name}.bias", (n_out,))], f"{name}.out") if bias else y

    def norm(x, name):
        g = const(f"{name}.gamma", np.ones(HIDDEN, np.float32))
        b = const(f"{name}.beta", np.zeros(HIDDEN, np.float32))
        return node("LayerNormalization", [x, g, b], f"{name}.out", axis=-1, epsilon=1e-5)

    def gelu(x, name):
        d = node("Div", [x, "sqrt2"], f"{name}.div")
        e = node("Erf", [d], f"{name}.erf")
        p = node("Add", [e, "one"], f"{name}.add")
        m = node("Mul", [x, p], f"{name}.mul")
        return node("Mul", [m, "half"], f"{name}.out")

    def heads(x, name, perm):
        r = node("Reshape", [x, "heads_shape"], f"{name}.reshape")
        return node("Transpose", [r], f"{name}.transpose", perm=perm)

    def attention(x, name, mask):
        q = heads(linear(x, f"{name}.q", HIDDEN, HIDDEN), f"{name}.qh", [0, 2, 1, 3])
        k = heads(linear(x, f"{name}.k", HIDDEN, HIDDEN), f"{name}.kh", [0, 2, 3, 1])
        v = heads(linear(x, f"{name}.v", HIDDEN, HIDDEN), f"{name}.vh", [0, 2, 1, 3])
        s = node("Div", [node("MatMul", [q, k], f"{name}.qk"), "scale"], f"{name}.scaled")
        if mask is not None:
            s = node("Add", [s, mask], f"{name}.masked")
        p = node("Softmax", [s], f"{name}.softmax", axis=-1)
        c = node(
            "Transpose", [node("MatMul", [p, v], f"{name}.pv")], f"{name}.ct", perm=[0, 2, 1, 3]
        )
        c = node("Reshape", [c, "flat_shape"], f"{name}.merged")
        return linear(c, f"{name}.o", HIDDEN, HIDDEN)

    def layer(x, i, mask, pre_norm):
        name = f"layer{i}"
        if pre_norm:
            h = node(
                "Add", [x, attention(norm(x, f"{name}.ln1"), f"{name}.attn", mask)], f"{name}.res1"
            )
            f = linear(
                gelu(linear(norm(h, f"{name}.ln2"), f"{name}.fc1", HIDDEN, FFN), f"{name}.gelu"),
                f"{name}.fc2",
                FFN,
                HIDDEN,
            )
            return node("Add", [h, f], f"{name}.res2")
        h = norm(
            node("Add", [x, attention(x, f"{name}.attn", mask)], f"{name}.res1"), f"{name}.ln1"
        )
        f = linear(
            gelu(linear(h, f"{name}.fc1", HIDDEN, FFN), f"{name}.gelu"), f"{name}.fc2", FFN, HIDDEN
        )
        return norm(node("Add", [h, f], f"{name}.res2"), f"{name}.ln2")

    return nodes, inits, w, const, node, norm, gelu, layer


def bert(layers: int):
    from onnx import TensorProto, helper

    seq, vocab = 128, 30522
    rng = np.random.default_rng(0)
    nodes, inits, w, const, node, norm, _gelu, layer = _graph_parts(layers, seq, rng)
    const("positions", np.arange(seq, dtype=np.int64).reshape(1, seq))
    const("zeros_ids", np.zeros((1, seq), np.int64))
    const("minus", np.array(-10000.0, np.float32))
    const("mask_axes", np.array([1, 2], np.int64))
    e = node("Gather", [w("word_embeddings", (vocab, HIDDEN)), "input_ids"], "emb.word")
    p = node("Gather", [w("position_embeddings", (512, HIDDEN)), "positions"], "emb.pos")
    t = node("Gather", [w("token_type_embeddings", (2, HIDDEN)), "zeros_ids"], "emb.type")
    x = norm(node("Add", [node("Add", [e, p], "emb.ep"), t], "emb.sum"), "emb.ln")
    m = node("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT)
    m = node("Mul", [node("Sub", ["one", m], "mask.inv"), "minus"], "mask.add")
    mask = node("Unsqueeze", [m, "mask_axes"], "mask")
    for i in range(layers):
        x = layer(x, i, mask, pre_norm=False)
    nodes[-1].output[0] = "last_hidden_state"
    graph = helper.make_graph(
        nodes,
        "bert",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
            for n in ("input_ids", "attention_mask")
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, HIDDEN])],
        inits,
    )
    return graph


def whisper(layers: int):
    from onnx import TensorProto, helper

    frames, positions = 3000, 1500
    rng = np.random.default_rng(1)
    nodes, inits, w, _const, node, norm, gelu, layer = _graph_parts(layers, positions, rng)
    c1 = node(
        "Conv",
        ["input_features", w("conv1.weight", (HIDDEN, 80, 3)), w("conv1.bias", (HIDDEN,))],
        "conv1",
        pads=[1, 1],
    )
    c2 = node(
        "Conv",
        [
            gelu(c1, "conv1.gelu"),
            w("conv2.weight", (HIDDEN, HIDDEN, 3)),
            w("conv2.bias", (HIDDEN,)),
        ],
        "conv2",
        pads=[1, 1],
        strides=[2],
    )
    x = node("Transpose", [gelu(c2, "conv2.gelu")], "tokens", perm=[0, 2, 1])
    x = node("Add", [x, w("embed_positions", (positions, HIDDEN))], "embedded")
    for i in range(layers):
        x = layer(x, i, None, pre_norm=True)
    x = norm(x, "ln_post")
    nodes[-1].output[0] = "last_hidden_state"
    graph = helper.make_graph(
        nodes,
        "whisper_encoder",
        [helper.make_tensor_value_info("input_features", TensorProto.FLOAT, [1, 80, frames])],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, [1, positions, HIDDEN]
            )
        ],
        inits,
    )
    return graph


def save(graph, folder: Path, name: str) -> dict[str, Path]:
    """The model embedded (`<name>.onnx`) and with external data (`<name>_ext/model.onnx`)."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    embedded = folder / f"{name}.onnx"
    onnx.save_model(model, embedded)
    ext_dir = folder / f"{name}_ext"
    ext_dir.mkdir()
    external = ext_dir / "model.onnx"
    onnx.save_model(
        model,
        external,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=1024,
    )
    return {"embedded": embedded, "external": external}


def fp16_weight_bytes(path: Path) -> int:
    import onnx

    model = onnx.load(path, load_external_data=False)
    return sum(2 * int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == 1)


def _run(argv: list[str], cwd: Path | None = None) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of one process, measured by /usr/bin/time: a child forked
    from this (large) process would report this process's peak as its own (Linux keeps the
    high-water mark across exec)."""
    with tempfile.NamedTemporaryFile(suffix=".rss") as rss:
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=cwd,
        )
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {proc.stderr.decode()[-2000:]}")
        return elapsed, int(Path(rss.name).read_text().split()[-1]) * 1024


def zip_dir(folder: Path, out: Path) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder.parent))


def whole_ours(model: Path, work: Path) -> tuple[float, int]:
    out = work / "ours.zip"
    return _run([str(BIN / "ane-kernels"), "onnx", str(model), "-o", str(out)])


def whole_onnxsim(model: Path, work: Path) -> float:
    package = work / "onnxsim.mlpackage"
    shutil.rmtree(package, ignore_errors=True)
    start = time.perf_counter()
    _run(
        [
            str(BIN / "onnxsim"),
            str(model),
            "simplified.onnx",
            "--emit-coreml",
            package.name,
        ],
        cwd=work,  # it reads the simplified model's external data from where it runs
    )
    zip_dir(package, work / "onnxsim.zip")
    return time.perf_counter() - start


_IN_PROCESS = """
import sys, time, json, shutil, zipfile
from pathlib import Path
which, model, work, rounds = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from bench.bench_onnx import zip_dir

def ours():
    from app.cli import main
    import contextlib, io
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["onnx", str(model), "-o", str(work / "ours_in.zip"), "--json"]) == 0

def onnxsim_():
    import onnx, onnxsim
    package = work / "onnxsim_in.mlpackage"
    shutil.rmtree(package, ignore_errors=True)
    simplified, ok = onnxsim.simplify(onnx.load(str(model)))
    onnxsim.export_coreml(simplified, str(package))
    zip_dir(package, work / "onnxsim_in.zip")

fn = ours if which == "ours" else onnxsim_
fn()  # warm: imports, first-call costs
times = []
for _ in range(rounds):
    start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
print(json.dumps(min(times)))
"""


def in_process(which: str, model: Path, work: Path, rounds: int) -> float:
    repo = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run(
        [sys.executable, "-c", _IN_PROCESS, which, str(model), str(work), str(rounds), repo],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


# The least any importer does with the weights, in process, best of `rounds` after a warm-up:
# read the external data file's fp32 values, round them to fp16 and store them in a zip (CRC
# included), no graph at all. A bound on "in process": no conversion of the model can be faster.
_FLOOR = """
import sys, time, json, zipfile
import numpy as np
data, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

def once():
    weights = np.fromfile(data, np.float32).astype(np.float16)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        with zf.open("weights/weight.bin", "w", force_zip64=True) as f:
            f.write(memoryview(weights).cast("B"))

once()
times = []
for _ in range(rounds):
    start = time.perf_counter(); once(); times.append(time.perf_counter() - start)
print(json.dumps(min(times)))
"""


def floor(external: Path, work: Path, rounds: int) -> float:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _FLOOR,
            str(external.with_name("model.onnx.data")),
            str(work / "floor.zip"),
            str(rounds),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--models", default="bert,whisper")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.models.split(","):
            graph = {"bert": bert, "whisper": whisper}[name](args.layers)
            paths = save(graph, folder, name)
            del graph
            work = folder / f"{name}_work"
            work.mkdir()
            weights = fp16_weight_bytes(paths["external"])
            size = paths["embedded"].stat().st_size
            ours_t, sim_t, rss = [], [], {}
            for _ in range(args.rounds):  # alternating
                t, rss["embedded"] = whole_ours(paths["embedded"], work)
                ours_t.append(t)
                sim_t.append(whole_onnxsim(paths["embedded"], work))
            _, rss["external"] = whole_ours(paths["external"], work)
            ours_in = in_process("ours", paths["embedded"], work, args.rounds)
            sim_in = in_process("onnxsim", paths["embedded"], work, 1)
            floor_s = floor(paths["external"], work, args.rounds)
            row = {
                "model": name,
                "layers": args.layers,
                "fp16_weight_mib": weights / 2**20,
                "file_mib": size / 2**20,
                "whole_ours_s": min(ours_t),
                "whole_onnxsim_s": min(sim_t),
                "whole_ratio": min(sim_t) / min(ours_t),
                "in_process_ours_s": ours_in,
                "in_process_onnxsim_s": sim_in,
                "in_process_ratio": sim_in / ours_in,
                "floor_s": floor_s,
                "floor_ratio": sim_in / floor_s,
                "rss_external_mib": rss["external"] / 2**20,
                "rss_external_x_fp16": rss["external"] / weights,
                "rss_embedded_mib": rss["embedded"] / 2**20,
                "rss_embedded_over_file_x_fp16": (rss["embedded"] - size) / weights,
            }
            results.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(work)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
