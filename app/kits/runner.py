"""A kit run from its zip alone, as an app runs it, on the project's reference executor:

    kit = Kit.open("model.kit.zip")
    tokens, logits = kit.generate([1, 2, 3], max_new_tokens=8)

1. the prompt's embeddings gathered from the embedding table (rows of fp16);
2. prefill: the prompt in chunks of the kit's `prefill` length (the last one padded), each chunk
   through every decoder program in order (`prefill` function), with `length` = the tokens the
   cache already holds and cos/sin = the RoPE table's rows at the chunk's positions; with
   `kv: io` the programs' new K/V rows (`k_<i>`, `v_<i>`) are written into the cache at `length`
   by the caller, with `kv: state` the programs write them into their states themselves;
3. the head pieces on the last token's hidden state, their logits concatenated in vocabulary
   order; the greedy choice is the next token;
4. decode: that token through every decoder program (`decode` function, one token), the head,
   and so on.

A kit is a file a user hands in, checked before any of it is used: its zip by the checked
reader (app/packaging/zipread.py), its kit.json by the bounded JSON reader into `KitManifest`
(app/kits/manifest.py), and every member of the zip against kit.json's `files`: each listed
with its sha256 (checked when the kit is opened), none missing from the zip, none in the zip but
not listed. Every fault is a KitError naming the file and the key (`ane-kernels generate` exits
2 with it).
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from app.checkpoints.config import json_limits
from app.core.jsonfile import read_json, validate
from app.errors import RequestError
from app.kits.manifest import KIT_JSON, READABLE_KIT_VERSIONS, KitManifest
from app.packaging.zipread import CheckedZip, ZipFault
from app.reference import Executor
from app.reference.load import ArtifactError, open_files

# A lazy kit holds programs whose weights together fit its largest program's, or this much: a
# small kit is loaded once, a large one a program at a time.
HOLD_FLOOR_BYTES = 64 << 20


class KitError(RequestError):
    """The kit cannot be run: a missing or altered file, a kit.json of another version."""

    def __init__(self, message: str):
        super().__init__("kit", message, title="Unusable kit")


def open_zip(path: str | Path | BinaryIO) -> CheckedZip:
    """A kit zip (a path, or a file open for reading) through the checked reader."""
    try:
        return CheckedZip(path, field="kit")
    except ZipFault as exc:
        raise KitError(f"cannot read the kit zip: {exc.message}") from None


def read_zip(path: str | Path | BinaryIO) -> dict[str, bytes]:
    """Every file of a kit zip (a path, or a file open for reading), in memory."""
    files = open_zip(path)
    return {name: files.read(name) for name in files}


def read_manifest(files: Mapping[str, Any]) -> tuple[dict[str, Any], KitManifest]:
    """The kit's kit.json, bounded (ANE_MAX_JSON_BYTES, before it is inflated) and checked:
    as written, and as the model that checked it."""
    if KIT_JSON not in files:
        raise KitError(f"no {KIT_JSON} in the zip: not a model kit (ane-kernels model)")
    limits = json_limits()
    data = (
        files.read(KIT_JSON, limits.max_bytes) if isinstance(files, CheckedZip) else files[KIT_JSON]
    )
    meta = read_json(data, KIT_JSON, limits, "kit")
    version = meta.get("kit_version") if isinstance(meta, dict) else None
    if version not in READABLE_KIT_VERSIONS:  # a kit of another version is told so first
        *first, last = map(str, READABLE_KIT_VERSIONS)
        readable = f"{', '.join(first)} and {last}" if first else last
        raise KitError(f"kit_version {version!r}; this runner reads {readable}")
    return meta, validate(meta, KitManifest, KIT_JSON, "kit")


# What runs one function of one program: (program name, function or None for a program's
# only one, the states its functions share) -> inputs -> outputs. The reference executor by
# default; the device check (app/kits/device_check.py) passes Core ML's.
Functions = Callable[[str, str | None, dict], Callable[[dict], Mapping[str, np.ndarray]]]


def reference_functions(kit: Kit) -> Functions:
    def make(program: str, function: str | None, states: dict):
        def run(inputs: dict) -> Mapping[str, np.ndarray]:
            # the program asked for at each call: a kit being written holds one at a time
            executor = Executor(kit.program(program), function=function or "main", states=states)
            return executor.run(inputs).outputs

        return run

    return make


class _Decoder:
    """One decoder program: its two functions, and the cache it keeps (inputs or states)."""

    def __init__(self, functions: Functions, meta: Mapping[str, Any], kv: str):
        self.layers = list(range(meta["layers"][0], meta["layers"][1] + 1))
        self.kv = kv
        self.states: dict = {}  # shared by both functions, as one MLState
        self.prefill = functions(meta["name"], "prefill", self.states)
        self.decode = functions(meta["name"], "decode", self.states)
        shape = tuple(meta["kv_cache"]["shape"])
        self.cache = (
            {
                f"{kind}_cache_{i}": np.zeros(shape, np.float16)
                for i in self.layers
                for kind in ("k", "v")
            }
            if kv == "io"
            else {}
        )

    def run(self, x: np.ndarray, length: int, cos: np.ndarray, sin: np.ndarray, real: int):
        """The hidden states after these layers; the first `real` tokens' keys and values kept."""
        executor = self.decode if x.shape[-1] == 1 else self.prefill
        inputs = {"x": x, "length": np.array([length], np.int32), "cos": cos, "sin": sin}
        outputs = executor(inputs | self.cache)
        for i in self.layers if self.kv == "io" else ():
            for kind in ("k", "v"):
                rows = outputs[f"{kind}_{i}"][:, :, :real]
                self.cache[f"{kind}_cache_{i}"][:, :, length : length + real] = rows
        return outputs["y"]


class Kit:
    """A kit's programs and tables, loaded; `session()` starts an empty cache."""

    def __init__(
        self, files: Mapping[str, bytes], *, being_written: bool = False, lazy: bool = False
    ):
        """`being_written`: `files` are read from the zip as it is written (app/kits/kitzip.py),
        whose digests were taken from those very bytes on their way out, so they are not taken
        again; and it is `lazy`. `lazy`: the programs are loaded when run, their weights used
        where `files` holds them, and dropped least recently used first so that the weights held
        never exceed the largest program's (or HOLD_FLOOR_BYTES): a kit's programs may together
        be many GB (Kit.open)."""
        self._files = files
        self._being_written = being_written
        self._lazy = lazy or being_written
        self._programs: dict[str, Any] = {}  # least recently used first
        meta, manifest = read_manifest(files)
        self.manifest = manifest
        try:
            self._load(files, meta, manifest)
        except ArtifactError as exc:
            raise KitError(f"a program cannot be read back: {exc}") from None

    def _load(
        self, files: Mapping[str, bytes], meta: dict[str, Any], manifest: KitManifest
    ) -> None:
        listed = manifest.files
        unlisted = sorted(set(files) - set(listed) - {KIT_JSON})
        if unlisted:
            raise KitError(f"{unlisted[0]} is in the zip but not in kit.json's files")
        for path, digest in listed.items():
            if path not in files:
                raise KitError(f"{path} (listed in kit.json) is not in the kit")
            if not self._being_written and hashlib.sha256(files[path]).hexdigest() != digest:
                raise KitError(f"{path}: its sha256 differs from kit.json's")
        self.meta = meta
        self.embeddings = _table(files, manifest.embeddings.path, manifest.embeddings.shape)
        self.rope = _table(files, manifest.rope.path, manifest.rope.shape)
        for program in manifest.programs:
            root = program.path.rstrip("/") + "/"
            if not any(name.startswith(root) for name in files):
                raise KitError(f"program {program.name}: no file under {root} in the kit")
        self._by_name = {p["name"]: p for p in meta["programs"]}
        self._hold_bytes = max(
            [HOLD_FLOOR_BYTES, *(p.get("weight_bytes", 0) for p in meta["programs"])]
        )
        if not self._lazy:
            for name in self._by_name:
                self.program(name)
        self.tokenizer = files.get("tokenizer.json")  # verbatim, for a tokenizer library

    @property
    def loaded(self) -> list[str]:
        """The programs held now: every one; for a lazy kit, those whose weights together fit
        the largest program's (or HOLD_FLOOR_BYTES)."""
        return list(self._programs)

    def _weight_bytes(self, name: str) -> int:
        return int(self._by_name[name].get("weight_bytes", 0))

    def program(self, name: str):
        """A program of the kit, read back from its own files (as an app's loader reads them)."""
        if name in self._programs:
            self._programs[name] = self._programs.pop(name)  # now the most recently used
        else:
            if self._lazy:
                self._make_room(self._weight_bytes(name))
            try:
                # a lazy kit's weights are used where they are (mapped from its zip)
                self._programs[name] = _load_program(self._files, self._by_name[name], self._lazy)
            except ArtifactError as exc:
                raise KitError(f"a program cannot be read back: {exc}") from None
        return self._programs[name]

    def _make_room(self, needed: int) -> None:
        """Drop the least recently used programs until `needed` bytes more fit the budget."""
        held = sum(self._weight_bytes(n) for n in self._programs)
        dropped = False
        while self._programs and held + needed > self._hold_bytes:
            held -= self._weight_bytes(next(iter(self._programs)))
            del self._programs[next(iter(self._programs))]
            dropped = True
        if dropped:
            gc.collect()  # a program's ops and vars reference each other: free its weights now

    @classmethod
    def open(cls, path: str | Path) -> Kit:
        """A kit zip on disk, read as it is used: its files mapped (not read into memory), every
        digest checked, its programs loaded when run."""
        return cls(open_zip(path), lazy=True)

    @property
    def context(self) -> int:
        return int(self.meta["context"])

    def session(self, functions: Functions | None = None) -> Session:
        return Session(self, functions)

    def generate(
        self, prompt: Sequence[int], max_new_tokens: int, stop: Sequence[int] = ()
    ) -> tuple[list[int], list[np.ndarray]]:
        return self.session().generate(prompt, max_new_tokens, stop)


def _table(files: Mapping[str, Any], path: str, shape: list[int]) -> np.ndarray:
    """A fp16 table of the kit, its size checked against the shape kit.json gives."""
    if path not in files:
        raise KitError(f"{path} (named in kit.json) is not in the kit")
    data = files[path]
    if len(data) != 2 * int(np.prod(shape)):
        raise KitError(
            f"{path}: {len(data)} bytes, not the {2 * int(np.prod(shape))} of fp16 {shape}"
        )
    return np.frombuffer(data, "<f2").reshape(shape)


def _load_program(files: Mapping[str, bytes], meta: Mapping[str, Any], in_place: bool):
    root = meta["path"].rstrip("/") + "/"
    own = {name[len(root) :]: name for name in files if name.startswith(root)}
    return open_files(
        own, lambda relative: files[own[relative]], meta["path"], in_place=in_place
    ).program


class Session:
    """One conversation: the KV caches and how many positions they hold."""

    def __init__(self, kit: Kit, functions: Functions | None = None):
        self.kit = kit
        meta = kit.meta
        functions = functions or reference_functions(kit)
        self.decoders = [
            _Decoder(functions, p, meta["kv"]) for p in meta["programs"] if p["role"] == "decoder"
        ]
        self.heads = [
            (functions(p["name"], None, {}), p["vocab"])
            for p in meta["programs"]
            if p["role"] == "head"
        ]
        self.chunk = int(meta["prefill"])
        self.length = 0

    def _rope(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin [1, 1, head_dim, count] of positions start..start + count − 1."""
        rows = self.kit.rope[:, start : start + count]  # [2, count, head_dim]
        return rows[0].T[None, None], rows[1].T[None, None]

    def feed(self, ids: Sequence[int]) -> np.ndarray:
        """Run `ids` through the decoder programs (prefill chunks, or one decode step); their
        last layer's hidden states [len(ids), hidden]."""
        if self.length + len(ids) > self.kit.context:
            raise RequestError(
                "max_new_tokens",
                f"{self.length + len(ids)} positions are over "
                f"the kit's context of {self.kit.context}",
            )
        width = 1 if len(ids) == 1 and self.length else self.chunk
        hidden = []
        for start in range(0, len(ids), width):
            part = list(ids[start : start + width])
            x = self.kit.embeddings[part + [0] * (width - len(part))].T[None, :, None, :]
            cos, sin = self._rope(self.length, width)
            for decoder in self.decoders:
                x = decoder.run(x, self.length, cos, sin, len(part))
            hidden.append(x[0, :, 0, : len(part)].T)
            self.length += len(part)
        return np.concatenate(hidden)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """One token's logits over the whole vocabulary, the head pieces side by side."""
        return self.logits_rows(np.asarray(hidden).reshape(1, -1))[0]

    def logits_rows(self, hidden: np.ndarray) -> np.ndarray:
        """[tokens, vocab]: several tokens' logits, each head piece run on every token in turn
        (so a kit that reads its programs one at a time reads each once)."""
        pieces = []
        for run, _ in self.heads:
            rows = [
                run({"x": np.asarray(h, np.float16).reshape(1, -1, 1, 1)})["logits"] for h in hidden
            ]
            pieces.append(np.stack([np.asarray(r).reshape(-1) for r in rows]))
        return np.concatenate(pieces, axis=1)

    def generate(
        self, prompt: Sequence[int], max_new_tokens: int, stop: Sequence[int] = ()
    ) -> tuple[list[int], list[np.ndarray]]:
        """Greedy decoding: (the new tokens, one row of logits per new token)."""
        if not prompt:
            raise RequestError("prompt_ids", "at least one token")
        if max_new_tokens < 1:
            raise RequestError("max_new_tokens", f"at least 1, got {max_new_tokens}")
        vocab = self.kit.embeddings.shape[0]
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise RequestError(
                "prompt_ids", f"token {bad[0]} is outside the vocabulary 0..{vocab - 1}"
            )
        if len(prompt) + max_new_tokens > self.kit.context + 1:
            raise RequestError(
                "max_new_tokens",
                f"{len(prompt)} prompt tokens and "
                f"{max_new_tokens} new ones do not fit the kit's context of "
                f"{self.kit.context}",
            )
        return self.greedy(self.logits(self.feed(prompt)[-1]), max_new_tokens, stop)

    def greedy(
        self, row: np.ndarray, max_new_tokens: int, stop: Sequence[int] = ()
    ) -> tuple[list[int], list[np.ndarray]]:
        """Greedy decoding on from the cache as it is, `row` the last position's logits."""
        tokens, rows = [], []
        for step in range(max_new_tokens):
            token = int(np.argmax(row))
            tokens.append(token)
            rows.append(row)
            if token in stop or step == max_new_tokens - 1:
                break
            row = self.logits(self.feed([token])[-1])
        return tokens, rows
