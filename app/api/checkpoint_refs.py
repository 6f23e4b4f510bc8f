"""A kernel request's `checkpoint` (app/checkpoints/reference.py) turned into what the request
would say by hand: the config's params under the body's, and each weight as
`sha256:<file>#<tensor name>` (converted to fp16 once per store, as any such reference).

This runs before the body is validated, so the op's params may come from the config alone.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.checkpoints import CheckpointReference, Tensor, resolve
from app.checkpoints.files import read_header
from app.errors import FieldError, RequestError
from app.kernels import get_op
from app.uploads.blobstore import BlobStore

FIELD = "checkpoint"


def with_checkpoint(data: dict[str, Any], op: str, blobs: BlobStore) -> dict[str, Any]:
    """`data` without its `checkpoint`, with the params and weight references it stands for;
    weights the body gives itself win. Blocking (reads the files' headers)."""
    try:
        ref = CheckpointReference.model_validate(data[FIELD])
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in (FIELD, *err["loc"]))
        raise RequestError(where, err["msg"], title="Invalid checkpoint reference") from None
    tensors, files = _tensors(ref, blobs)
    call = {k: v for k, v in data.items() if k in get_op(op).params.model_fields}
    try:
        resolved = resolve(op, tensors, ref.config, ref.layer_range(), call)
    except FieldError as exc:
        field = exc.field or FIELD
        field = field if field.startswith(FIELD) else f"{FIELD}.{field}"
        raise RequestError(field, exc.message, title=exc.title) from None
    except (TypeError, ValueError, AttributeError) as exc:  # a value of the wrong JSON type
        raise RequestError(
            f"{FIELD}.config",
            f"not a config.json the decoder ops read: {exc}",
            title="Invalid checkpoint reference",
        ) from None
    weights = {name: f"{files[t.name]}#{t.name}" for name, t in resolved.located.items()}
    given = listed if isinstance(listed := data.get("weights"), dict) else {}
    rest = {k: v for k, v in data.items() if k != FIELD}
    return {**rest, **resolved.params, "weights": {**weights, **given}}


def _tensors(ref: CheckpointReference, blobs: BlobStore) -> tuple[dict[str, Tensor], dict]:
    """Every tensor of the referenced files by name, and the digest of the file holding each."""
    tensors: dict[str, Tensor] = {}
    files: dict[str, str] = {}
    for i, digest in enumerate(ref.blobs):
        field = f"{FIELD}.blob" if isinstance(ref.blob, str) else f"{FIELD}.blob[{i}]"
        entry = blobs.checkpoint(digest)
        if entry is None:
            raise RequestError(
                field,
                f"no checkpoint blob {digest}; upload the safetensors file "
                "with POST /v1/blobs first",
                title="Unknown blob",
            )
        for name, tensor in read_header(entry.path, field, f"checkpoint blob {digest}").items():
            tensors.setdefault(name, tensor)
            files.setdefault(name, digest)
    return tensors, files
