"""Build manifests: a TOML file naming the kernels a farm builds, with their weights on disk.

    [defaults]
    format = "mlpackage"        # or "mil", "mlmodelc"
    target = "ios18"

    [kernels.q_proj]
    op = "conv"
    params = { in_channels = 64, out_channels = 64, spatial = 16 }
    weights = { weight = "weights/q.npy" }          # .npy, or "file.safetensors#tensor"
    format = "mlmodelc"                              # overrides [defaults]

Weight paths are relative to the manifest. A safetensors path without `#tensor` reads the tensor
named after the weight.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.digest import tensor_digest


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the kernel and the field."""


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["mlpackage", "mil", "mlmodelc"] = "mlpackage"
    target: Literal["ios18", "ios17"] = "ios18"


class KernelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: str
    params: dict[str, Any] = Field(default_factory=dict)
    weights: dict[str, str] = Field(default_factory=dict)
    format: Literal["mlpackage", "mil", "mlmodelc"] | None = None
    target: Literal["ios18", "ios17"] | None = None


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: Defaults = Field(default_factory=Defaults)
    kernels: dict[str, KernelEntry] = Field(min_length=1)


class Kernel:
    """One manifest kernel, resolved: options filled in, weights loaded (memory-mapped) and hashed."""

    def __init__(self, name: str, entry: KernelEntry, defaults: Defaults, base: Path):
        self.name, self.op, self.params = name, entry.op, entry.params
        self.format = entry.format or defaults.format
        self.target = entry.target or defaults.target
        self.weights = {
            w: load_weight(base, spec, w, name) for w, spec in sorted(entry.weights.items())
        }
        self.digests = {w: tensor_digest(a) for w, a in self.weights.items()}

    @property
    def inputs(self) -> dict[str, Any]:
        """Everything that determines the artifact, as recorded in the lock."""
        return {"op": self.op, "params": self.params, "format": self.format, "target": self.target,
                "weights": self.digests}  # fmt: skip

    @property
    def filename(self) -> str:
        return f"{self.name}.{self.format}.zip"


def load_weight(base: Path, spec: str, weight: str, kernel: str) -> np.ndarray:
    file, _, tensor = spec.partition("#")
    path = (base / file).resolve()
    where = f"kernels.{kernel}.weights.{weight}"
    if not path.is_file():
        raise ManifestError(f"{where}: {path} does not exist")
    try:
        if path.suffix == ".safetensors":
            from safetensors.numpy import safe_open

            with safe_open(str(path), "np") as f:
                name = tensor or weight
                if name not in f.keys():  # noqa: SIM118 - safe_open has no __contains__
                    raise ManifestError(
                        f"{where}: {path.name} has no tensor {name!r} (has {', '.join(f.keys())})"
                    )
                return f.get_tensor(name)
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{where}: cannot read {path}: {exc}") from None


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
        if not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ManifestError(f"kernels.{name}: names must be identifiers (letters, digits, _)")
    return [
        Kernel(n, e, manifest.defaults, path.parent) for n, e in sorted(manifest.kernels.items())
    ]
