"""BLOBFILE references of a program: find them all, and check each against its weight file.

A reference is `(path, offset)` with `path` starting `@model_path/`; `offset` is where the
entry's 64-byte metadata block starts in a Blob Storage v2 file (coremltools
`MILBlob/Blob/StorageFormat.hpp`: u32 sentinel 0xDEADBEEF, u32 data type, u64 size in bytes,
u64 data offset). A reference is good when its path stays inside the model's folder (as text:
app/language/paths.py; on disk: `confined`, symlinks resolved), the file exists, the metadata
block lies inside it, starts with the sentinel, and points at data that ends inside the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.language.errors import WeightFileError
from app.language.messages import MIL_pb2
from app.language.paths import model_relative

_SENTINEL = 0xDEADBEEF
_METADATA = struct.Struct("<IIQQ")


@dataclass(frozen=True, slots=True)
class BlobRef:
    path: str  # as written, "@model_path/weights/weight.bin"
    offset: int
    place: tuple[str, ...]  # where it is, formatted only for an error message

    @property
    def where(self) -> str:
        return ", ".join(self.place)


def refs_in_value(value: MIL_pb2.Value, place: tuple[str, ...]) -> Iterator[BlobRef]:
    kind = value.WhichOneof("value")
    if kind == "blobFileValue":
        yield BlobRef(value.blobFileValue.fileName, value.blobFileValue.offset, place)
    elif kind == "immediateValue":
        imm = value.immediateValue
        inner = imm.WhichOneof("value")
        if inner == "tuple":
            for v in imm.tuple.values:
                yield from refs_in_value(v, place)
        elif inner == "list":
            for v in imm.list.values:
                yield from refs_in_value(v, place)
        elif inner == "dictionary":
            for kv in imm.dictionary.values:
                yield from refs_in_value(kv.key, place)
                yield from refs_in_value(kv.value, place)


def op_place(op: MIL_pb2.Operation) -> str:
    return f"op {op.type}" + (f" -> {op.outputs[0].name}" if op.outputs else "")


def _in_block(block: MIL_pb2.Block, place: tuple[str, ...]) -> Iterator[BlobRef]:
    for op in block.operations:
        for name, value in op.attributes.items():
            yield from refs_in_value(value, (*place, op_place(op), f"attribute {name}"))
        for name, arg in op.inputs.items():
            for binding in arg.arguments:
                if binding.WhichOneof("binding") == "value":
                    yield from refs_in_value(binding.value, (*place, op_place(op), f"input {name}"))
        for inner in op.blocks:
            yield from _in_block(inner, (*place, op_place(op)))


def program_attribute_refs(program: MIL_pb2.Program) -> list[BlobRef]:
    refs: list[BlobRef] = []
    for name, value in program.attributes.items():
        refs.extend(refs_in_value(value, (f"program attribute {name}",)))
    return refs


def blob_refs(program: MIL_pb2.Program) -> list[BlobRef]:
    """Every BLOBFILE reference in the program, every block specialisation included."""
    refs = program_attribute_refs(program)
    for fname in sorted(program.functions):
        fn = program.functions[fname]
        for name, value in fn.attributes.items():
            refs.extend(refs_in_value(value, (f"function {fname}", f"attribute {name}")))
        for opset, block in fn.block_specializations.items():
            refs.extend(_in_block(block, (f"function {fname} ({opset})",)))
    return refs


def check_refs(refs: list[BlobRef], locate: Callable[[str], Path], label: str) -> list[str]:
    """Check every reference against the file `locate(relative path)` gives; return the
    referenced paths (relative to `@model_path`). `label` names the source in messages."""
    by_file: dict[str, list[BlobRef]] = {}
    for ref in refs:
        try:
            by_file.setdefault(model_relative(ref.path), []).append(ref)
        except ValueError as exc:
            raise WeightFileError(str(exc), ref.where) from None
    for relative, file_refs in by_file.items():
        try:
            target = locate(relative)
        except ValueError as exc:
            raise WeightFileError(str(exc), file_refs[0].where) from None
        if not target.is_file():
            raise WeightFileError(
                f"BLOBFILE {file_refs[0].path!r} refers to {relative}, which {label} does not contain",
                file_refs[0].where,
            )
        with target.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            for ref in file_refs:
                _check_entry(f, ref, relative, size)
    return sorted(by_file)


def confined(root: Path, relative: str) -> Path:
    """`root / relative`, symlinks resolved, which must still be inside `root` (resolved too);
    ValueError when it is not."""
    base = Path(root).resolve()
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        raise ValueError(f"{relative} resolves to {target}, outside {base}")
    return target


def _check_entry(f, ref: BlobRef, relative: str, size: int) -> None:
    if ref.offset + 64 > size:
        raise WeightFileError(
            f"BLOBFILE offset {ref.offset} is past the end of {relative} ({size} bytes)", ref.where
        )
    f.seek(ref.offset)
    sentinel, _dtype, length, data_offset = _METADATA.unpack(f.read(_METADATA.size))
    if sentinel != _SENTINEL:
        raise WeightFileError(
            f"no blob entry at offset {ref.offset} of {relative} (sentinel {sentinel:#x})",
            ref.where,
        )
    if data_offset + length > size:
        raise WeightFileError(
            f"blob entry at offset {ref.offset} of {relative} holds {length} bytes from "
            f"{data_offset}, past the end of the file ({size} bytes)",
            ref.where,
        )
