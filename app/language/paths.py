"""Where a program's BLOBFILE values point: paths under `@model_path`, the folder of the model.

A path is confined to that folder: `@model_path/` then a relative POSIX path of plain parts.
`@model_path//etc/passwd` (an absolute path after the prefix), `..`, `.`, empty parts and
backslashes are refused here, as text; whoever opens the file also resolves symlinks and
checks the result is still inside the folder (app/mlmodelc/blobrefs.py).
"""

MODEL_PATH = "@model_path/"
# The one weight file this service writes (coremltools writes the same name).
WEIGHT_PATH = f"{MODEL_PATH}weights/weight.bin"


def model_relative(path: str) -> str:
    """The part of a BLOBFILE path after `@model_path/`; ValueError saying why when the path is
    not a plain relative path inside the model's folder."""
    if not path.startswith(MODEL_PATH):
        raise ValueError(f"BLOBFILE path {path!r} is not under {MODEL_PATH}")
    relative = path[len(MODEL_PATH) :]
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\\" in relative or "\0" in relative:
        raise ValueError(
            f"BLOBFILE path {path!r} must name a file inside the model's folder: no absolute "
            "path, no '.', '..' or empty part, no backslash"
        )
    return relative
