"""The artifact formats: the one table every list of formats, file name and choice derives from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    compiled: bool  # written by a compiler backend (a job), not by packaging alone
    # Loaded by runtimes that drive the ANE directly, without Core ML: the ops the preflight
    # reports failing there are kept spelled out by the default graph passes (docs/passes.md).
    ane_direct: bool = False
    # Described by a Core ML model description: its inputs and outputs are feature arrays, of
    # the few dtypes that have a feature type (DType.can_be_io).
    core_ml_io: bool = False

    @property
    def extension(self) -> str:
        """What an artifact's file name ends with: `<name>.<extension>`."""
        return f"{self.name}.zip"


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "mlpackage",
            "zipped .mlpackage (Core ML model package)",
            compiled=False,
            core_ml_io=True,
        ),
        Format(
            "mil",
            "model.mil + weights/weight.bin (what ANE-direct runtimes load)",
            compiled=False,
            ane_direct=True,
        ),
        Format(
            "mlmodelc",
            "compiled .mlmodelc (needs a compiler backend)",
            compiled=True,
            core_ml_io=True,
        ),
        Format("aimodel", "Core AI .aimodel (needs the coreai extra: coreai-core)", False),
    )
}
DEFAULT_FORMAT: FormatName = "mlpackage"
PACKAGED = tuple(name for name, f in FORMATS.items() if not f.compiled)
COMPILED = tuple(name for name, f in FORMATS.items() if f.compiled)
# The formats a model kit's programs take (app/kits): Core ML's and the raw MIL bundle
KIT_FORMATS = ("mlpackage", "mlmodelc", "mil")

# For pydantic models and type hints; spelled out because Literal needs literal values, and
# checked against the table below so the two cannot drift.
FormatName = Literal["mlpackage", "mil", "mlmodelc", "aimodel"]
assert get_args(FormatName) == tuple(FORMATS)


def artifact_filename(name: str, fmt: str, for_devices: bool = False) -> str:
    """A model's artifact file name: `<name>.<format>.zip`, or `<name>.aimodelc.zip` for an
    .aimodel compiled for device architectures (the zip holds their .aimodelc bundles)."""
    return f"{name}.aimodelc.zip" if for_devices else f"{name}.{FORMATS[fmt].extension}"


def available_formats(*, compiler: bool, coreai: bool) -> list[str]:
    """The formats a service can answer with, in table order: compiled ones need a compiler
    backend, aimodel needs coreai-core installed."""
    return [
        name
        for name, f in FORMATS.items()
        if (compiler or not f.compiled) and (coreai or name != "aimodel")
    ]


def describe_formats() -> str:
    return "; ".join(f"{f.name}: {f.description}" for f in FORMATS.values())
