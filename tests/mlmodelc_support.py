"""Helpers for the `app.mlmodelc` tests: the golden bundles and ways to compare bundles."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from coremltools.proto import Model_pb2

from app.mlmodelc.coremldata import read_coremldata
from app.mlmodelc.wire import length_delimited, read_fields

GOLDENS = Path(__file__).resolve().parent / "fixtures" / "goldens"
SILERO = sorted(p for p in (GOLDENS / "silero-vad").iterdir() if p.is_dir())
ADD_MODEL = GOLDENS / "coremltools-add_model" / "add_model.mlmodelc"
MIL_TEXTS = sorted(GOLDENS.rglob("*.mil"))


def bundle_of(pair: Path) -> Path:
    return next(pair.glob("*.mlmodelc"))


def files_of(bundle: Path) -> list[str]:
    return sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file())


def read_model(path: Path) -> Model_pb2.Model:
    model = Model_pb2.Model()
    model.ParseFromString(path.read_bytes())
    return model


def user_defined_sorted(description: bytes) -> bytes:
    """The description with `metadata.userDefined`'s entries in key order (the one part of
    coremldata.bin Apple writes in an order that changes from run to run)."""
    out = b""
    for field in read_fields(description):
        if field.number != 100:
            out += field.raw
            continue
        parts = read_fields(field.payload)
        entries = sorted((p for p in parts if p.number == 100), key=lambda p: p.payload)
        others = [p.raw for p in parts if p.number != 100]
        out += length_delimited(100, b"".join(others) + b"".join(e.raw for e in entries))
    return out


def coremldata_modulo_map_order(data: bytes) -> bytes:
    """coremldata.bin with the userDefined map entries sorted, all else byte for byte."""
    _, description = read_coremldata(data)
    head, tail = data[:0x4B], data[0x53 + len(description) :]
    normalized = user_defined_sorted(description)
    assert len(normalized) == len(description)
    return head + data[0x4B:0x53] + normalized + tail


def extract_kernel_package(zip_bytes: bytes, into: Path) -> Path:
    """Unzip a kernel zip and return the `.mlpackage` inside."""
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        zf.extractall(into)
    return next(into.glob("*.mlpackage"))


def coremltools_loads(package: Path) -> int:
    """Load a package with coremltools' own reader and its MIL loader, which re-creates every op
    through the builder (type inference, input checks) and reads every weight; returns the
    number of ops of the default function."""
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load

        model = ct.models.MLModel(str(package), skip_model_load=True)
        spec = model.get_spec()
        prog = load(
            spec,
            specification_version=spec.specificationVersion,
            file_weights_dir=str(package / "Data/com.apple.CoreML/weights"),
        )
        prog._check_early_error_out_for_invalid_program()
    name = spec.description.defaultFunctionName or "main"
    return len(prog.functions[name].operations)
