"""The programs of a kit, as the one builder takes them (app/artifacts.py: built, within the
budget, preflighted as every program is), and their files in the kit's format.

- A decoder chunk: layers i..j of the checkpoint in ONE program (the decoder_stack op) with two
  functions sharing one weight.bin: `prefill` (a fixed chunk of P tokens) and `decode` (1 token).
  Both attend over the KV cache: a prompt longer than P is prefilled chunk after chunk, each
  chunk's keys written into the cache before the next one runs. The cache is inputs with the
  new rows as outputs (`kv: io`), or ios18 states the programs update in place (`kv: state`).
- A head piece: the final RMSNorm and the lm_head rows of one vocabulary range (a graph of the
  rmsnorm and conv ops) on one token [1, hidden, 1, 1] -> `logits` [1, rows, 1, 1].
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.catalog_build import build_functions
from app.core.files import Sink, scratch_dir
from app.core.formats import FORMATS
from app.graphs.build import build_graph
from app.graphs.spec import GraphParams
from app.graphs.split import Chain
from app.kernels import ProgramBuild
from app.mil.ceilings import Ceilings
from app.mlmodelc import compile_package
from app.packaging import Entry, layout
from app.packaging.bundle import program_files
from app.passes import hand_written

TARGET = "ios18"  # multifunction packages and states are ios18 (spec 9)
STACK = "decoder_stack"
STREAMED_BYTES = 1 << 20  # a compiled bundle's files from this size on are streamed from disk
COPY_CHUNK = 8 << 20


@dataclass(frozen=True)
class KitProgram(ABC):
    """One program of a kit as a request to the builder (`ProgramRequest`): built from the
    checkpoint's weights as they are (not hashed: the kit hashes each file once, as it writes
    it), in the kit's format, its preflight findings kept for kit.json; never split (the plan
    keeps each program within the budget, and one over it gets the preflight's warning) and not
    verified on its own (the kit is, whole: app/kits/verify.py)."""

    name: str
    format: str
    weights: Mapping[str, np.ndarray] = field(repr=False)
    quantize: Mapping[str, Any] | None

    preflight = "warn"
    verifies = False
    max_quantization_error = None

    @property
    def known_digests(self) -> Mapping[str, str]:
        return {}

    def build(
        self, random_seed: int | None, ceilings: Ceilings, weight_budget: int | None = None
    ) -> ProgramBuild:
        """The program from the checkpoint's weights, through the default pipeline for programs
        written by hand (app/passes `hand_written`: it leaves today's programs as they are)."""
        pipeline = hand_written(ane_direct=FORMATS[self.format].ane_direct)
        return self.as_written(ceilings).as_written_through(pipeline)

    @abstractmethod
    def as_written(self, ceilings: Ceilings) -> ProgramBuild:
        """The program as written (each kind of program its own)."""

    def splits_within(self, weight_bytes: int, budget: int) -> bool:
        return False

    def split(self, build: ProgramBuild, budget: int) -> Chain:
        raise ValueError(f"{self.name}: a kit's programs are planned within the budget")


@dataclass(frozen=True)
class DecoderChunk(KitProgram):
    """Layers `params` names, prefill and decode functions over a cache of `context` positions."""

    params: Mapping[str, Any]
    context: int
    prefill: int
    kv: str

    def as_written(self, ceilings: Ceilings) -> ProgramBuild:
        params = dict(self.params) | {
            "mode": "decode",
            "cache_len": self.context,
            "kv_cache": "state" if self.kv == "state" else "inputs",
        }
        functions = {"prefill": {"seq_len": self.prefill}, "decode": {"seq_len": 1}}
        return build_functions(
            STACK,
            params,
            functions,
            self.weights,
            target=TARGET,
            name=self.name,
            quantize=self.quantize,
        )


@dataclass(frozen=True)
class HeadPiece(KitProgram):
    """The final norm and one range of the lm_head's rows (weights `norm.weight` and
    `lm_head.weight`), on one token."""

    hidden: int
    eps: float

    def as_written(self, ceilings: Ceilings) -> ProgramBuild:
        rows = self.weights["lm_head.weight"]
        conv: dict[str, Any] = {
            "id": "lm_head",
            "op": "conv",
            "params": {"out_channels": len(rows)},
            "inputs": {"x": "norm"},
        }
        if self.quantize is not None:
            conv["quantize"] = self.quantize
        graph = GraphParams.model_validate(
            {
                "inputs": {"x": {"shape": [1, self.hidden, 1, 1], "dtype": "fp16"}},
                "nodes": [
                    {
                        "id": "norm",
                        "op": "rmsnorm",
                        "params": {"eps": self.eps},
                        "inputs": {"x": "x"},
                    },
                    conv,
                ],
                "outputs": {"logits": "lm_head"},
            }
        )
        return build_graph(graph, self.weights, target=TARGET, name=self.name, ceilings=ceilings)


def program_path(name: str, fmt: str) -> str:
    """Where a program sits in the kit: `<name>.mlpackage`, `<name>.mlmodelc` or `<name>/`."""
    return {"mlpackage": f"{name}.mlpackage", "mlmodelc": f"{name}.mlmodelc"}.get(fmt, name)


@contextlib.contextmanager
def program_entries(
    build: ProgramBuild, fmt: str, profile: str | None = None, scratch: Path | None = None
) -> Iterator[list[Entry]]:
    """The program's files in the kit, for the block: small ones as bytes, the weights as a
    stream (from the program's consts, or from the compiled bundle on disk, compiled in a
    scratch directory under `scratch`: see app/core/files.py), so that writing them copies nothing
    whole into memory."""
    if fmt == "mlmodelc":
        with scratch_dir(".compile", scratch) as tmp:
            yield _compiled(build, profile, tmp)
        return
    prefix = f"{build.name}/" if fmt == "mil" else ""
    yield list(program_files(build, fmt, prefix=prefix).entries)


def _compiled(build: ProgramBuild, profile: str | None, work: Path) -> list[Entry]:
    """The .mlmodelc the linux backend writes for the program's package, in `work`."""
    package = program_files(build, "mlpackage")
    for entry in package.entries:
        target = work / "src" / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            if entry.data is not None:
                f.write(entry.data)
            else:
                assert entry.stream is not None  # an entry has its data or a stream
                entry.stream(f)
    for folder in package.empty_dirs:
        (work / "src" / folder).mkdir(parents=True, exist_ok=True)
    source = work / "src" / layout.package_root(build.name)
    out = work / f"{build.name}.mlmodelc"
    # the package is this scratch folder's own: the bundle links its weight.bin, no copy
    if profile:
        compile_package(source, out, profile, link_weights=True)
    else:
        compile_package(source, out, link_weights=True)
    return [
        _on_disk(f"{out.name}/{p.relative_to(out).as_posix()}", p)
        for p in sorted(out.rglob("*"))
        if p.is_file()
    ]


def _on_disk(path: str, file: Path) -> Entry:
    size = file.stat().st_size
    if size < STREAMED_BYTES:
        return Entry(path, file.read_bytes())

    def copy(out: Sink) -> int:
        written = 0
        with open(file, "rb") as f:
            while chunk := f.read(COPY_CHUNK):
                written += out.write(chunk) or len(chunk)
        return written

    return Entry(path, stream=copy, size=size, compress=False)
