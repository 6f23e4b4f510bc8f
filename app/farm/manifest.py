"""Build manifests: a TOML file naming the kernels a farm builds, with their weights on disk.

    [defaults]
    format = "mlpackage"        # or "mil", "mlmodelc"
    target = "ios18"

    [kernels.q_proj]
    op = "conv"
    params = { in_channels = 64, out_channels = 64, spatial = 16 }
    weights = { weight = "weights/q.npy" }          # .npy, or "file.safetensors#tensor"
    format = "mlmodelc"                              # overrides [defaults]
    quantize = { mode = "palettize", nbits = 4 }     # as a kernel request's quantize

    [kernels.q_proj_devices]
    op = "conv"
    params = { in_channels = 64, out_channels = 64, spatial = 16 }
    format = "aimodel"
    architectures = ["m4", "a18-pro"]                # one .aimodelc each, by a macOS worker

    [kernels.ffn]
    graph = "graphs/ffn.json"                        # a POST /v1/graphs body, one program
    weights = { "gate.weight" = "weights/gate.npy", "up.weight" = "weights/up.npy" }

    [kernels.vit]
    onnx = "models/vit.onnx"                         # an ONNX model (its external data beside it)
    shapes = { pixel_values = [1, 3, 224, 224] }     # its dynamic axes fixed; io_dtype = "fp32"
    passes = "default"                               # its graph passes (docs/passes.md)

    [kernels.qwen3]
    model = "Qwen3-0.6B"                             # a checkpoint folder: a model kit
    format = "mlmodelc"                              # and the options of `ane-kernels model`:
    context = 1024                                   # context, prefill, device, quantize, kv,
    prefill = 64                                     # verify
    device = "a18-pro"

    [kernels.layers_0_15]
    op = "decoder_stack"                             # or ffn, attention, decoder_layer (one layer)
    checkpoint = "model/model.safetensors.index.json"    # or model.safetensors, or the directory
    config = "model/config.json"                     # default: config.json beside the checkpoint
    layers = "0-15"                                  # decoder_stack: a range; the others: "3"
    params = { seq_len = 64 }                        # the call's params; the config gives the rest

Paths are relative to the manifest. A safetensors path without `#tensor` reads the tensor named
after the weight. `architectures` in [defaults] applies to the kernels whose format is aimodel. A checkpoint entry's weights are the layers' tensors in fp16 (app/checkpoints).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.client.flows import checkpoint_files
from app.core.digest import file_digest, tensor_digest
from app.core.formats import DEFAULT_FORMAT, FormatName, artifact_filename
from app.core.names import name_problem
from app.errors import FieldError
from app.kits.job import ModelRequest
from app.mil import DEFAULT_TARGET, TargetName
from app.request import KernelRequest, WeightRef, field_of
from app.schemas.wire import GraphRequest
from app.tensors.headers import read_tensor


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the kernel and the field."""


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: FormatName = DEFAULT_FORMAT
    target: TargetName = DEFAULT_TARGET
    architectures: list[str] | None = Field(None, description="for the aimodel kernels")


class KernelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: str | None = None
    graph: str | None = Field(None, description="a graph request (JSON), instead of an op")
    params: dict[str, Any] = Field(default_factory=dict)
    weights: dict[str, str] = Field(default_factory=dict)
    format: FormatName | None = None
    target: TargetName | None = None
    quantize: dict[str, Any] | None = Field(None, description="as a kernel request's quantize")
    architectures: list[str] | None = Field(
        None, description="format aimodel: the chips to compile it for (device table names)"
    )
    checkpoint: str | None = Field(None, description="safetensors checkpoint: the op's weights")
    config: str | None = Field(None, description="its config.json (default: beside it)")
    layers: str | None = Field(None, description='the layer ("3") or range ("0-15")')
    model: str | None = Field(None, description="a checkpoint folder: the entry is a model kit")
    onnx: str | None = Field(None, description="an ONNX model file: the entry is its import")
    shapes: dict[str, list[int | list[int]]] | None = Field(
        None, description="an ONNX entry's --shape (one axis may list several sizes)"
    )
    io_dtype: Literal["fp16", "fp32"] | None = Field(None, description="an ONNX entry's --io-dtype")
    passes: str | list[str] | dict[str, Any] | None = Field(
        None, description="an ONNX entry's --passes (a graph entry's are in its graph file)"
    )
    context: int | None = Field(None, description="a model kit's --context")
    prefill: int | None = Field(None, description="a model kit's --prefill")
    device: str | None = Field(None, description="a model kit's --device")
    kv: Literal["io", "state"] | None = Field(None, description="a model kit's --kv")
    verify: bool | None = Field(None, description="a model kit's --verify")
    strict: bool | None = Field(None, description="a model kit's --strict")

    @model_validator(mode="after")
    def _op_or_graph(self) -> KernelEntry:
        kit_only = {
            "context": self.context,
            "prefill": self.prefill,
            "device": self.device,
            "kv": self.kv,
            "verify": self.verify,
            "strict": self.strict,
        }
        onnx_only = (self.shapes, self.io_dtype, self.passes)
        if any(v is not None for v in onnx_only) and self.onnx is None:
            raise ValueError(
                'shapes, io_dtype and passes are options of an onnx entry (onnx = "<model>"); '
                "a graph entry's passes are in its graph file"
            )
        if self.onnx is not None:
            if (
                self.op
                or self.graph
                or self.model
                or self.params
                or self.weights
                or self.checkpoint
            ):
                raise ValueError(
                    "an onnx entry names a model file and its options (shapes, io_dtype, "
                    "passes, quantize, format, target), not op, graph, model, params, weights or checkpoint"
                )
            return self
        if self.model is not None:
            if self.op or self.graph or self.params or self.weights or self.checkpoint:
                raise ValueError(
                    "a model entry names a checkpoint folder and the kit's options "
                    "(format, context, prefill, device, quantize, kv, verify, strict), "
                    "not op, graph, params, weights or checkpoint"
                )
            return self
        if any(v is not None for v in kit_only.values()):
            raise ValueError(
                f"{', '.join(k for k, v in kit_only.items() if v is not None)}: "
                'options of a model entry (model = "<checkpoint folder>")'
            )
        if (self.op is None) == (self.graph is None):
            raise ValueError(
                "give either op (with params), graph (a graph request file) or "
                "model (a checkpoint folder)"
            )
        if self.graph is not None and (self.params or self.quantize):
            raise ValueError(
                "a graph entry has no params or quantize: the graph file holds "
                "everything (nodes[i].quantize)"
            )
        if (self.checkpoint is None) != (self.layers is None) or (
            self.config is not None and self.checkpoint is None
        ):
            raise ValueError("checkpoint and layers go together (config with them)")
        if self.checkpoint is not None and self.graph is not None:
            raise ValueError(
                "a checkpoint feeds an op (ffn, attention, decoder_layer, "
                "decoder_stack), not a graph"
            )
        return self


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: Defaults = Field(default_factory=Defaults)
    kernels: dict[str, KernelEntry] = Field(min_length=1)


class Kernel:
    """One manifest kernel, resolved: options filled in, weights loaded (memory-mapped) and hashed."""

    graph: dict[str, Any] | None
    weights: dict[str, np.ndarray]
    format: FormatName
    target: TargetName | None  # None for a model kit: it builds for its device's target
    architectures: list[str] | None
    digests: dict[str, str]
    kit_options: dict[str, Any]  # a model kit's options as its request takes them
    onnx_options: dict[str, Any]  # an ONNX import's shapes and io_dtype
    passes: str | list[str] | dict[str, Any] | None  # an ONNX import's

    def __init__(self, name: str, entry: KernelEntry, defaults: Defaults, base: Path):
        self.name, self.op, self.params = name, entry.op, entry.params
        self.quantize = entry.quantize
        self.model: Path | None = None
        self.onnx: Path | None = None
        if entry.model is not None:
            self._model(entry, defaults, base)
            return
        if entry.onnx is not None:
            self._onnx(entry, defaults, base)
            return
        self.graph = load_graph(base, entry.graph, name) if entry.graph is not None else None
        if self.graph is not None:
            ids = {n.get("id") for n in self.graph["nodes"] if isinstance(n, dict)}
            for key in entry.weights:
                if key.partition(".")[0] not in ids or "." not in key:
                    raise ManifestError(
                        f"kernels.{name}.weights.{key}: name a graph weight "
                        "<node>.<weight> after one of its nodes"
                    )
        self.format = entry.format or defaults.format
        self.target = entry.target or defaults.target
        self.architectures = entry.architectures
        if self.architectures is None and self.format == "aimodel":
            self.architectures = defaults.architectures
        self.weights = {
            w: load_weight(base, spec, w, name) for w, spec in sorted(entry.weights.items())
        }
        if entry.checkpoint is not None:
            self.params, from_checkpoint = load_checkpoint(base, entry, name)
            self.weights = {**from_checkpoint, **self.weights}
        self._check()
        self.digests = {w: tensor_digest(a) for w, a in self.weights.items()}

    def _model(self, entry: KernelEntry, defaults: Defaults, base: Path) -> None:
        """A model kit's entry: its checkpoint folder's files hashed (they are its inputs), its
        options checked as the service checks them."""
        where = f"kernels.{self.name}"
        self.model = (base / str(entry.model)).resolve()
        if not self.model.is_dir():
            raise ManifestError(f"{where}.model: {self.model} is not a checkpoint folder")
        self.graph, self.weights, self.target = None, {}, None
        self.format = entry.format or defaults.format
        options = {
            "context": entry.context,
            "prefill": entry.prefill,
            "device": entry.device,
            "quantize": entry.quantize,
            "kv": entry.kv,
            "verify": entry.verify,
            "strict": entry.strict,
        }
        self.kit_options = {k: v for k, v in options.items() if v is not None}
        files = checkpoint_files(self.model)
        if "config.json" not in files:
            raise ManifestError(f"{where}.model: {self.model} has no config.json")
        self.digests = {n: file_digest(p) for n, p in files.items()}
        try:
            ModelRequest.create(self.digests, {"format": self.format, **self.kit_options})
        except FieldError as exc:
            raise ManifestError(f"{where}.{exc.field}: {exc.message}") from None

    def _onnx(self, entry: KernelEntry, defaults: Defaults, base: Path) -> None:
        """An ONNX entry: the model and the external-data files it names hashed (they are its
        inputs), the request checked as the service checks it."""
        from app.onnx.reader import local_files

        where = f"kernels.{self.name}"
        self.onnx = (base / str(entry.onnx)).resolve()
        if not self.onnx.is_file():
            raise ManifestError(f"{where}.onnx: {self.onnx} does not exist")
        self.graph, self.weights, self.kit_options = None, {}, {}
        self.format = entry.format or defaults.format
        self.target = entry.target or defaults.target
        self.architectures = None
        self.onnx_options = {"shapes": entry.shapes or {}, "io_dtype": entry.io_dtype or "fp16"}
        self.passes = entry.passes
        self.quantize = entry.quantize
        try:
            files = {n: WeightRef.of_file(p) for n, p in local_files(self.onnx).items()}
            self._onnx_request = KernelRequest.create(
                onnx={"model": self.onnx.name, **self.onnx_options},
                weights=files,
                format=self.format,
                target=self.target,
                name=self.name,
                passes=self.passes,
                quantize=self.quantize,
            )
        except FieldError as exc:
            raise ManifestError(f"{where}.{exc.field}: {exc.message}") from None
        self.digests = {n: ref.digest for n, ref in files.items()}

    @property
    def request_key(self) -> str:
        """A model kit's job id, an ONNX import's cache key (the service derives the same)."""
        if self.onnx is not None:
            return self._onnx_request.key
        return ModelRequest.create(self.digests, {"format": self.format, **self.kit_options}).key

    def _check(self) -> None:
        """The request this kernel becomes, checked here as the service checks it, so that a
        bad entry fails before anything is hashed or uploaded (its weights the service checks
        when it builds)."""
        where = f"kernels.{self.name}"
        assert self.target is not None  # only a model kit has none, and it is not checked here
        try:
            if self.graph is None:
                KernelRequest.create(
                    self.op,
                    self.params,
                    quantize=self.quantize,
                    format=self.format,
                    target=self.target,
                    name=self.name,
                    architectures=self.architectures,
                )
            else:
                where += ".graph"  # faults are named by their path in the graph file
                wire = GraphRequest.model_validate(self.graph)
                KernelRequest.create(
                    graph=wire.graph(),
                    passes=wire.passes,
                    format=self.format,
                    target=self.target,
                    name=self.name,
                    architectures=self.architectures,
                )
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ManifestError(f"{where}.{field_of(err['loc'])}: {err['msg']}") from None
        except FieldError as exc:
            raise ManifestError(f"{where}.{exc.field}: {exc.message}") from None

    @property
    def inputs(self) -> dict[str, Any]:
        """Everything that determines the artifact, as recorded in the lock."""
        if self.model is not None:
            return {"model": self.digests, "options": self.kit_options, "format": self.format}
        if self.onnx is not None:
            passes = {} if self.passes is None else {"passes": self.passes}  # locks before stay
            quantize = {} if self.quantize is None else {"quantize": self.quantize}
            return {
                "onnx": self.digests,
                **self.onnx_options,
                **passes,
                **quantize,
                "format": self.format,
                "target": self.target,
            }
        what: dict[str, Any] = (
            {"graph": self.graph}
            if self.graph is not None
            else {"op": self.op, "params": self.params}
        )
        if self.quantize is not None:  # only when set: locks written before stay valid
            what["quantize"] = self.quantize
        if self.architectures is not None:
            what["architectures"] = self.architectures
        return {**what, "format": self.format, "target": self.target, "weights": self.digests}

    @property
    def filename(self) -> str:
        if self.model is not None:
            return f"{self.name}.kit.zip"
        return artifact_filename(self.name, self.format, self.architectures is not None)


def load_weight(base: Path, spec: str, weight: str, kernel: str) -> np.ndarray:
    """A weight file (.npy, or `file.safetensors#tensor`), mapped from disk."""
    file, _, tensor = spec.partition("#")
    path = (base / file).resolve()
    where = f"kernels.{kernel}.weights.{weight}"
    if not path.is_file():
        raise ManifestError(f"{where}: {path} does not exist")
    try:
        return read_tensor(path, where, tensor_name=tensor or weight)
    except FieldError as exc:
        raise ManifestError(f"{where}: cannot read {path}: {exc.message}") from None
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read {path}: {exc}") from None


def load_checkpoint(
    base: Path, entry: KernelEntry, kernel: str
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(params, fp16 weights) of a checkpoint entry: the config's params under the entry's."""
    from app.checkpoints import load

    assert entry.op is not None and entry.checkpoint is not None and entry.layers is not None
    checkpoint = (base / entry.checkpoint).resolve()
    folder = checkpoint if checkpoint.is_dir() else checkpoint.parent
    config = (base / entry.config).resolve() if entry.config else folder / "config.json"
    try:
        loaded = load(entry.op, checkpoint, config, entry.layers, entry.params)
    except FieldError as exc:
        raise ManifestError(f"kernels.{kernel}.checkpoint: {exc}") from None
    return loaded.params, loaded.weights


def load_graph(base: Path, file: str, kernel: str) -> dict[str, Any]:
    """A graph request file: inputs, nodes and outputs (node weights may be inline or digests;
    the manifest's `weights` add files)."""
    path = (base / file).resolve()
    where = f"kernels.{kernel}.graph"
    try:
        graph = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{where}: cannot read {path}: {exc}") from None
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list):
        raise ManifestError(f"{where}: {path.name} is not a graph request (inputs, nodes, outputs)")
    return {k: v for k, v in graph.items() if k not in ("name", "format", "target", "verify")}


def load_manifest(path: str | Path) -> list[Kernel]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path} is not valid TOML: {exc}") from None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ManifestError(f"{path}: {loc}: {err['msg']}") from None
    for name in manifest.kernels:
        if (problem := name_problem(name)) is not None:
            raise ManifestError(f"kernels.{name}: {problem}")
    return [
        Kernel(n, e, manifest.defaults, path.parent) for n, e in sorted(manifest.kernels.items())
    ]
