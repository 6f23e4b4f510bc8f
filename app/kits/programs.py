"""The programs of a kit, built, and their files in the kit's format.

- A decoder chunk: layers i..j of the checkpoint in ONE program (the decoder_stack op) with two
  functions sharing one weight.bin: `prefill` (a fixed chunk of P tokens) and `decode` (1 token).
  Both attend over the KV cache: a prompt longer than P is prefilled chunk after chunk, each
  chunk's keys written into the cache before the next one runs. The cache is inputs with the
  new rows as outputs (`kv: io`), or ios18 states the programs update in place (`kv: state`).
- A head piece: the final RMSNorm and the lm_head rows of one vocabulary range (a graph of the
  rmsnorm and conv ops) on one token [1, hidden, 1, 1] -> `logits` [1, rows, 1, 1].
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from app.graphs.build import build_graph
from app.graphs.spec import GraphParams
from app.kernels import KernelBuild
from app.kernels.functions import FunctionsBuild, build_functions
from app.mlmodelc import compile_package
from app.packaging import Entry, layout, write_kernel_zip
from app.packaging.bundle import program_files

TARGET = "ios18"  # multifunction packages and states are ios18 (spec 9)
STACK = "decoder_stack"


@dataclass(frozen=True)
class Built:
    """One program of the kit, built, with what kit.json says of it."""

    name: str
    role: str  # "decoder" or "head"
    build: KernelBuild
    describe: dict[str, Any]


def decoder_chunk(name: str, base: dict[str, Any], weights: dict[str, np.ndarray], *,
                  context: int, prefill: int, kv: str, quantize=None) -> FunctionsBuild:  # fmt: skip
    """Layers `base` names, prefill and decode functions over a cache of `context` positions."""
    params = base | {"mode": "decode", "cache_len": context,
                     "kv_cache": "state" if kv == "state" else "inputs"}  # fmt: skip
    functions = {"prefill": {"seq_len": prefill}, "decode": {"seq_len": 1}}
    return build_functions(STACK, params, functions, weights, target=TARGET, name=name,
                           quantize=quantize)  # fmt: skip


def head_piece(name: str, hidden: int, eps: float, norm: np.ndarray, rows: np.ndarray,
               quantize=None) -> KernelBuild:  # fmt: skip
    """The final norm and one range of the lm_head's rows, on one token."""
    conv: dict[str, Any] = {"id": "lm_head", "op": "conv", "params": {"out_channels": len(rows)},
                            "inputs": {"x": "norm"}}  # fmt: skip
    if quantize is not None:
        conv["quantize"] = quantize
    graph = GraphParams.model_validate({
        "inputs": {"x": {"shape": [1, hidden, 1, 1], "dtype": "fp16"}},
        "nodes": [{"id": "norm", "op": "rmsnorm", "params": {"eps": eps}, "inputs": {"x": "x"}},
                  conv],
        "outputs": {"logits": "lm_head"},
    })  # fmt: skip
    weights = {"norm.weight": norm, "lm_head.weight": rows}
    return build_graph(graph, weights, target=TARGET, name=name)


def signature(build: KernelBuild) -> dict[str, Any]:
    """Each function's inputs, states and outputs (name, shape, dtype)."""
    if isinstance(build, FunctionsBuild):
        return build.describe_functions()

    def io(var) -> dict[str, Any]:
        return {"name": var.name, "shape": list(var.tensor.shape), "dtype": var.tensor.dtype.value}

    fn = build.program.main
    return {"main": {"inputs": [io(v) for v in fn.inputs], "states": [],
                     "outputs": [io(v) for v in fn.outputs]}}  # fmt: skip


def program_path(name: str, fmt: str) -> str:
    """Where a program sits in the kit: `<name>.mlpackage`, `<name>.mlmodelc` or `<name>/`."""
    return {"mlpackage": f"{name}.mlpackage", "mlmodelc": f"{name}.mlmodelc"}.get(fmt, name)


def program_entries(build: KernelBuild, fmt: str, profile: str | None = None) -> list[Entry]:
    """The program's files in the kit, every one as bytes (kit.json lists their digests)."""
    if fmt == "mlmodelc":
        return _compiled(build, profile)
    prefix = f"{build.name}/" if fmt == "mil" else ""
    return [_materialized(e) for e in program_files(build, fmt, prefix=prefix).entries]


def _materialized(entry: Entry) -> Entry:
    if entry.data is not None:
        return entry
    assert entry.stream is not None
    buffer = BytesIO()
    entry.stream(buffer)
    return Entry(entry.path, buffer.getvalue(), compress=entry.compress)


def _compiled(build: KernelBuild, profile: str | None) -> list[Entry]:
    """The .mlmodelc the linux backend writes for the program's package."""
    with tempfile.TemporaryDirectory(prefix="kit-") as tmp:
        work = Path(tmp)
        packaged = BytesIO()
        write_kernel_zip(build, packaged, "mlpackage")
        with zipfile.ZipFile(packaged) as zf:
            zf.extractall(work / "src")
        source = work / "src" / layout.package_root(build.name)
        out = work / f"{build.name}.mlmodelc"
        compile_package(source, out, profile) if profile else compile_package(source, out)
        return [Entry(f"{out.name}/{p.relative_to(out).as_posix()}", p.read_bytes(),
                      compress=p.name != "weight.bin")
                for p in sorted(out.rglob("*")) if p.is_file()]  # fmt: skip
